"""The started sandboxes grading takes its workers from: a SandboxPool.

The grading service (service.py) holds one, filled between runs, and hands each run all its spares as a
pool of that run's own; a run given none takes from an empty pool, where each take starts a sandbox.
What a run took is said back to the service (`taken`, `warmed`), which stops those (no sandbox serves
two runs) and takes the others back."""

from autograder.sandbox.jail import Started


class SandboxPool:
    """Sandboxes started ahead, for grading to take over: take, give back, stop."""

    def __init__(self, spares=()):
        self.spares = list(spares)   # started, not taken
        self.taken = []      # the pids of the spares taken from this pool (or found unusable): never offered again
        self.warmed = None   # whether the grading that took from this pool wanted its workers warm, once it took

    def __len__(self):
        return len(self.spares)

    def fill(self, count, sandboxed, warm=False, kernel_kind=""):
        """Start sandboxes until the pool holds `count` (jail.Started: warm, kernel_kind)."""
        while len(self.spares) < count:
            self.spares.append(Started(sandboxed, warm, kernel_kind))

    def take(self, sandboxed, warm=False, kernel_kind=""):
        """A spare that is still alive and sandboxed alike (told to warm up as asked if it was not), or a
        new one."""
        self.warmed = bool(self.warmed) or warm
        while self.spares:
            spare = self.spares.pop()
            self.taken.append(spare.process.pid)   # used, or not usable: not to be offered again either way
            if spare.sandboxed == sandboxed and spare.control is not None and not spare.exited():
                spare.prepare(warm, kernel_kind)
                return spare
        return Started(sandboxed, warm, kernel_kind)

    def take_for(self, course, assignments):
        """A sandbox for grading the course's given assignments (of their ids): sandboxed as course.yml says,
        warm and with kernels prepared as they need."""
        chosen = [course.assignment(assignment) for assignment in assignments]
        return self.take(course.limits.sandboxed, course.uses_dynamo(*chosen), course.kernel_kind(*chosen))

    def hand_over(self):
        """All of this pool's spares, as a pool of their own for one run to take from; this one is left empty."""
        offered, self.spares = SandboxPool(self.spares), []
        return offered

    def give_back(self, offered, taken):
        """Once a run has ended: the spares `offered` it (hand_over) that it did not take come back to this
        pool; those it took, or that died, are stopped.  taken: their pids, or None where the run said
        nothing (it may have used any of them)."""
        for spare in offered.spares:
            if taken is None or spare.process.pid in taken or spare.exited():
                spare.stop()
            else:
                self.spares.append(spare)

    def state(self):
        """How many spares it holds, how many of them are ready (their torch imported), how many warm."""
        return {"spares": len(self.spares), "ready": sum(spare.ready() for spare in self.spares),
                "warm": sum(spare.warm for spare in self.spares)}

    def stop(self):
        for spare in self.spares:
            spare.stop()
        self.spares = []
