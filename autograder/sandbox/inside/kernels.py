"""Triton kernels on a machine without a GPU, and what a kernel launch did (this file runs in the
sandbox, in the warm worker, before any submission's code).

`prepare()` imports Triton once, in the warm worker: as it starts, when the grader starts it for an
assignment with `kernels: triton` (course.yml), or else the first time such a submission is forked.
Without a CUDA device Triton runs every @triton.jit kernel in its interpreter (TRITON_INTERPRET=1):
the same kernel code, one program after another, each tl operation a NumPy operation.  Its caches go
to the scratch space.

`prepare()` also wraps the interpreter's memory and arithmetic operations, so that a call made under
`Tally` (which counter.Work enters for a counted call) reports what its kernels did, counted where
the kernel runs and not taken from the answer; the count is a `Count`, held in the closures of the
wrappers (as counter.py's is), never in a module attribute:

  launches, programs   kernel launches and the programs of their grids
  addressed            elements the unmasked lanes of every load read (a program that visits a
                       tile reads it, a tile it skips is not counted; lanes a mask, or a tensor
                       descriptor's bounds, turn off read nothing and are not counted either)
  idle_loads           loads whose every lane is turned off: a tile visited wholly outside its tensor
  distinct             the distinct elements those lanes read, over the whole call: one element
                       loaded many times counts once
  flops                the products whose results reached a store (tl.store or an atomic took a value
                       computed from them): tl.dot as 2 * M * N * K, an element-wise multiply or
                       tl.fma as 2 per element (as counter.py counts torch's); flops_made: every
                       product made, stored or not
  output_stored        the share of the elements the call returned that a kernel stored during it
                       (Tally.note_call): an answer made before the call or copied after it is not
                       the kernel's
  foreign_tensors      the tensors the kernels were launched on that are neither the call's inputs
                       (or views of them) nor allocated by torch during it (Tally.note_call)
  out_of_bounds        the first tl.load, tl.store or atomic whose unmasked lanes reach outside every
                       tensor passed to the launch (the memory is not touched: the call fails with
                       OutOfBounds, which names the program and the operation)

Every form of load and store the interpreter runs reaches memory through four of its builder's
operations, which the wrappers count (COUNTED): tl.load and tl.store on pointers (masks, `other`,
cache and eviction hints, volatile=True), a tensor descriptor's load, store, gather and scatter (made
in the kernel with tl.make_tensor_descriptor, or on the host with TensorDescriptor), and the atomics
(tl.atomic_add and the rest, atomic_cas, and the atomic loads and stores).  The wrappers take whatever
arguments the interpreter passes, by position or by keyword, and pass them all on.  Deny by default:
when the wrappers are installed, every function of the interpreter that calls one of its native
module's memory functions (load, store, the atomics, and any function of it not known to touch no
memory) is found from its code; one that is not counted makes the kernel that uses it fail with
Uncounted, naming it (and one outside the builder stops the installation): no operation reaches
memory uncounted.

Before a kernel runs in the interpreter for the first time with given argument types and
constants, gpu_compiler.py compiles it for a GPU (without one): a body that is not Triton's language
stops the call with NotTriton.

The wrappers are put in place before any submission's code runs; after a call `Tally.intact` (part
of Work's `intact`, with torch's count) says whether they are still the interpreter's operations and
were never seen replaced: every wrapper, each time it runs, checks that the others are in place, so
one swapped during a call and put back before it returns is seen (code that takes them apart is also flagged on the trusted side,
rules.py, however it spells the names it can be read to use).

The wrappers, by what they stand for (each factory returns them; `_install` puts them in place):
`_memory` (the four operations every load, store and atomic reaches memory through), `_arithmetic`
(the products), `_launch` (a launch, its grid, a kernel's first run, a @triton.jit call inside a
kernel), `_refused` and `_routing` (the deny by default), `_carrying` (products passed on to what a
store takes), and `_tallying` (a counted call's begin and end).  They share a `Hooks`: the count,
the interpreter's own operations and the record of what is in place.  To count a new operation of
the interpreter: a wrapper in the factory of its kind, and its name in WRAPPED.

Imports, by their own names in the sandbox (sandbox/inside/__init__.py): gpu_compiler, counter.
"""

import dataclasses
import os

__all__ = ["kernel_device", "prepare", "open_device", "Tally", "OutOfBounds", "Uncounted", "memory_operations",
           "routed_operations", "COUNTED", "FIELDS", "INTERPRETED"]
DEPENDS = ("gpu_compiler", "counter")   # the modules of sandbox/inside/ this one imports by name

INTERPRETED = None      # True: Triton's interpreter; False: compiled for the CUDA device
_NONE = frozenset()
FIELDS = ("launches", "programs", "addressed", "idle_loads", "flops")
# The interpreter's builder operations that reach memory themselves, each counted by a wrapper; every
# other way a kernel reaches memory goes through them (memory_operations finds any that does not).
COUNTED = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
# The functions of the interpreter's native module known to touch no memory (every other one does).
NATIVE_ARITHMETIC = frozenset({"fma_fp32", "fma_fp64"})


def kernel_device(environment=None):
    """Where an assignment's kernels run, the one answer both sides of the wall ask (the grader as
    autograder.sandbox.inside.kernels, through jail; the worker and its children as `kernels`): "cuda"
    when AUTOGRADER_KERNEL_DEVICE says so (a grader with a CUDA device; jail.kernel_environment hands
    it to the worker), else "cpu": Triton's interpreter, which must be chosen before Triton is imported
    (torch imports it while the worker warms up), so the worker starts with TRITON_INTERPRET=1.  Read
    from the environment, not by asking torch: the warm worker must not initialise CUDA before it
    forks.  environment: this process's unless given."""
    environment = os.environ if environment is None else environment
    return "cuda" if environment.get("AUTOGRADER_KERNEL_DEVICE", "").lower() == "cuda" else "cpu"


class OutOfBounds(IndexError):
    """A kernel's load or store reached memory outside every tensor passed to its launch."""


class Uncounted(RuntimeError):
    """A kernel used an operation on memory that the grader's count does not cover."""


def memory_operations(module, native):
    """{qualified name: function} of the functions in `module` (its own functions and its classes'
    methods, lambdas and nested functions within them) whose code calls a memory function of `native`,
    the interpreter's native module: any callable of it outside NATIVE_ARITHMETIC."""
    import types
    memory = {name for name in dir(native) if not name.startswith("_") and name not in NATIVE_ARITHMETIC
              and callable(getattr(native, name)) and not isinstance(getattr(native, name), type)}
    natives = {name for name, value in vars(module).items() if value is native}
    direct = {name for name, value in vars(module).items()   # a memory function imported by its own name
              if any(value is getattr(native, function) for function in memory)}

    def touches(function):
        used = _names(function)
        return bool(used & direct) or bool(used & natives and used & memory)

    found = {}
    for name, value in vars(module).items():
        if isinstance(value, type) and value.__module__ == module.__name__:
            for attribute, member in vars(value).items():
                function = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                if touches(function):
                    found[f"{name}.{attribute}"] = function
        elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__ and touches(value):
            found[name] = value
    return found


def _names(function):
    """The global and attribute names a function's code (with the functions nested in it) uses."""
    import types

    def names(code):
        found = set(code.co_names)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                found |= names(constant)
        return found
    code = getattr(function, "__code__", None)
    return names(code) if code is not None else set()


def routed_operations(builder, counted=COUNTED):
    """The names of the builder's operations that reach memory through its counted ones (calling them,
    or one another, by name): a descriptor's load, store, gather and scatter, tl.load without a mask,
    the atomic loads, stores and poll."""
    routed, reached = set(), set(counted)
    while True:
        more = {name for name, operation in vars(builder).items()
                if name not in reached and _names(operation) & reached}
        if not more:
            return routed
        routed |= more
        reached |= more


def refusal(name):
    """What stands for an interpreter operation on memory that the count does not cover."""
    def refused(self, *args, **kwargs):
        raise Uncounted(f"the kernel uses {name}, an operation on memory of Triton's interpreter that the grader "
                        "cannot count: write the kernel with tl.load and tl.store, tensor descriptors or atomics")
    refused.__name__ = refused.__qualname__ = name
    return refused


def prepare():
    """Import Triton for the children to come (once).  Whether its interpreter runs the kernels was
    decided when the worker started (TRITON_INTERPRET=1 in its environment, jail.kernel_environment);
    without it they are compiled for the CUDA device, and Triton's driver is left for each child to
    make (worker.fresh_child)."""
    global INTERPRETED, _begin, _end, _intact, _storages, _own_array
    if INTERPRETED is not None:
        return
    INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
    os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/.triton/cache")
    os.environ.setdefault("TRITON_HOME", "/tmp")
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    if INTERPRETED:
        _begin, _end, _intact = _install()
        import gpu_compiler
        gpu_compiler.warm()
    import counter
    _storages, _own_array = counter.storages, counter.own_array   # held here: the grader's modules leave sys.modules in a child


def open_device(memory_mb):
    """In a child, before the submission's code: make CUDA's context (its threads start now, before
    the grader notes the child's threads) and hold torch's allocator to the child's memory limit.
    The allocator's limit is the child's own setting, so it is a guard against mistakes rather than a
    boundary (the child's code could raise it); what a child holds on the GPU is freed when it dies,
    which the grader waits for before the next submission (memory.wait_gpu_released)."""
    import torch
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, (memory_mb << 20) / total))
    _warm_gpu_compiler()
    # autograd's thread for the device starts at the first backward pass: start it now, so that the
    # threads the grader notes before the submission's code (student.StudentProcess) include it.
    x = torch.ones(2, device="cuda", requires_grad=True)
    (2 * x).sum().backward()
    torch.cuda.synchronize()


def _warm_gpu_compiler():
    """Compile and run one small kernel, so that Triton's GPU compiler is loaded and set up before the
    submission's first call, whose time limit would otherwise pay for it."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def fill(out, BLOCK: tl.constexpr):
        tl.store(out + tl.arange(0, BLOCK), tl.full([BLOCK], 1.0, tl.float32))

    ones = torch.zeros(16, device="cuda")
    fill[(1,)](ones, BLOCK=16)
    torch.cuda.synchronize()


@dataclasses.dataclass
class Count:
    """What the wrappers note, one instance held in their closures (as counter.py's count is), out of
    reach of any module attribute.  FIELDS are added up over a counted call; the rest is its record."""
    counting: bool = False             # a counted call is running (Tally)
    launches: int = 0
    programs: int = 0
    addressed: int = 0
    idle_loads: int = 0
    flops: int = 0                     # every product made (the stored ones are read from `products`)
    program: tuple = (0, 0, 0)         # the grid index of the program running now
    ranges: list = dataclasses.field(default_factory=list)       # (start, end) of each launched tensor's storage
    read: list = dataclasses.field(default_factory=list)         # the addresses each counted load read
    stored: list = dataclasses.field(default_factory=list)       # (addresses, bits or None) of each store, atomic
    products: dict = dataclasses.field(default_factory=dict)     # index -> FLOPs of each product made
    stored_products: set = dataclasses.field(default_factory=set)   # the products whose results reached a store
    launched: set = dataclasses.field(default_factory=set)       # the storages the kernels were launched on
    routed: frozenset = _NONE          # what a routing operation's arguments carry, while it runs
    replaced: bool = False             # a wrapper was once seen missing


# The interpreter's operations that the counting wrappers stand for (memory, arithmetic, the grid).
WRAPPED = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas",
           "create_dot", "create_fmul", "create_fma", "set_grid_idx")


class Hooks:
    """What every wrapper shares: the count, the interpreter's own operations they stand for (and how
    those take their arguments), and the wrappers put in place, which `intact` checks."""

    def __init__(self, interpreter):
        import inspect
        self.interpreter = interpreter
        self.builder = interpreter.InterpreterBuilder
        self.handle_type = interpreter.TensorHandle
        self.handle_type._products = _NONE     # what a handle carries unless an operation gave it more
        self.count = Count()
        self.originals = {name: vars(self.builder)[name] for name in WRAPPED}
        self.signatures = {name: inspect.signature(operation) for name, operation in self.originals.items()}
        self.wrappers = {}

    def put(self, owner, name, wrapper):
        wrapper.__name__ = wrapper.__qualname__ = name
        setattr(owner, name, wrapper)
        self.wrappers[(owner, name)] = wrapper

    def in_place(self):
        """Whether every wrapper is in place now."""
        return all(owner.__dict__.get(name) is wrapper for (owner, name), wrapper in self.wrappers.items())

    def watched(self):
        """Called by every wrapper, every time: a wrapper found missing while another runs (one
        replaced during a call, put back before it returns) is noted for good."""
        if not self.in_place():
            self.count.replaced = True

    def leading(self, name, builder, args, kwargs, count):
        """The first `count` parameters of the interpreter's operation `name` as this call gives them.
        The wrappers take the arguments the interpreter passes, by position or by keyword (a
        descriptor's load passes cache_policy and is_volatile by keyword), read the leading ones they
        count, and pass them all on as they came."""
        if len(args) >= count:
            return args[:count]
        bound = self.signatures[name].bind(builder, *args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())[1:count + 1]

    def carried(self, value):
        """The products a value carries (a handle, a tl.tensor, a tuple or list of them)."""
        if type(value) is self.handle_type:
            return value._products
        if isinstance(value, (tuple, list)):
            return _NONE.union(*(self.carried(item) for item in value))
        return getattr(getattr(value, "handle", None), "_products", _NONE)

    def carry(self, out, products):
        """Add `products` to what each handle of `out` carries."""
        handle_type = self.handle_type
        for item in out if isinstance(out, (tuple, list)) else (out,):
            handle = item if type(item) is handle_type else getattr(item, "handle", None)
            if type(handle) is handle_type:
                handle._products = handle._products | products


def _memory(hooks):
    """The wrappers of the four builder operations through which every load, store and atomic reaches
    memory (COUNTED): held to the launch's tensors (OutOfBounds), counted while a call is."""
    import numpy as np
    count, original = hooks.count, hooks.originals
    element_type = hooks.interpreter._get_np_dtype

    def reach(ptrs, mask, what):
        """Raise OutOfBounds when an unmasked lane of ptrs lies outside every launched tensor; the
        addresses of the unmasked lanes otherwise."""
        where = np.asarray(ptrs.data, dtype=np.uint64)
        lanes = where[np.broadcast_to(np.asarray(mask.data, dtype=bool), where.shape)] if mask is not None else where
        if lanes.size == 0:
            return lanes.ravel()
        size = np.dtype(element_type(ptrs.get_element_ty())).itemsize
        inside = np.zeros(lanes.shape, dtype=bool)
        for low, high in count.ranges:
            inside |= (lanes >= np.uint64(low)) & (lanes + np.uint64(size) <= np.uint64(high))
        if not inside.all():
            outside = int((~inside).sum())
            raise OutOfBounds(f"{what} of program {count.program} reaches {outside} element(s) outside every "
                              f"tensor passed to the kernel: a lane past the end of a tensor that no mask covers")
        return lanes.ravel()

    def lanes_of(value, ptrs, mask):
        """The value's elements at the unmasked lanes, in the order reach() gives their addresses."""
        data = np.broadcast_to(np.asarray(value.data), np.shape(ptrs.data))
        return data[np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)] if mask is not None else data.ravel()

    def write(ptrs, value, mask, what, adds=False):
        """A store's or atomic's unmasked lanes: held to the launch's tensors, and noted while counting
        (with the products whose results the stored value carries: none when it adds only zeros, which
        change nothing).  A store's values are kept, so that what the call returns can be held to them."""
        hooks.watched()
        lanes = reach(ptrs, mask, what)
        if count.counting:
            values = lanes_of(value, ptrs, mask)
            if not (adds and values.size and not np.any(values)):
                count.stored_products |= hooks.carried(value) | count.routed
            kept = None if adds or what != "tl.store" else np.ascontiguousarray(values).view(f"u{values.itemsize}").copy()
            count.stored.append((lanes, kept))   # the bits each lane stored (bfloat16 is uint16 here)

    def create_masked_load(self, *args, **kwargs):
        hooks.watched()
        ptrs, mask = hooks.leading("create_masked_load", self, args, kwargs, 2)
        lanes = reach(ptrs, mask, "tl.load")
        if count.counting:
            count.addressed += int(lanes.size)
            count.idle_loads += int(lanes.size == 0 and np.size(ptrs.data) > 0)
            count.read.append(lanes)
        return original["create_masked_load"](self, *args, **kwargs)

    def create_masked_store(self, *args, **kwargs):
        ptrs, value, mask = hooks.leading("create_masked_store", self, args, kwargs, 3)
        write(ptrs, value, mask, "tl.store")
        return original["create_masked_store"](self, *args, **kwargs)

    # Atomic operations read and write memory too: held to the same bounds, their writes noted (what
    # they leave there is not theirs alone: their values are not kept).
    def create_atomic_rmw(self, *args, **kwargs):
        operation, ptrs, value, mask = hooks.leading("create_atomic_rmw", self, args, kwargs, 4)
        write(ptrs, value, mask, "an atomic operation", adds="ADD" in str(operation).upper())
        return original["create_atomic_rmw"](self, *args, **kwargs)

    def create_atomic_cas(self, *args, **kwargs):
        ptrs, _, value = hooks.leading("create_atomic_cas", self, args, kwargs, 3)
        write(ptrs, value, None, "tl.atomic_cas")
        return original["create_atomic_cas"](self, *args, **kwargs)

    return {"create_masked_load": create_masked_load, "create_masked_store": create_masked_store,
            "create_atomic_rmw": create_atomic_rmw, "create_atomic_cas": create_atomic_cas}


def _arithmetic(hooks):
    """The wrappers of the products (tl.dot, an element-wise multiply, tl.fma): their FLOPs noted, and
    carried by their results until a store takes them (flops counts only those)."""
    import numpy as np
    count, original = hooks.count, hooks.originals

    def product(out, flops, *factors, added=()):
        """Note a product's FLOPs; its result carries them, with what its operands carried, until a store.
        A factor that is all zeros makes a result that depends on none of them: it carries only what is
        added to it (an fma's or a dot's accumulator)."""
        count.flops += flops
        count.products[len(count.products)] = flops
        if any(not np.any(np.asarray(factor.data)) for factor in factors):
            out._products = _NONE.union(*(hooks.carried(operand) for operand in added))
        else:
            out._products = frozenset((len(count.products) - 1,)).union(
                *(hooks.carried(operand) for operand in (*factors, *added)))
        return out

    def create_dot(self, *args, **kwargs):
        hooks.watched()
        out = original["create_dot"](self, *args, **kwargs)
        if count.counting:
            a, b, d = hooks.leading("create_dot", self, args, kwargs, 3)
            m, k = np.shape(a.data)[-2:]
            product(out, 2 * int(np.prod(np.shape(a.data)[:-2], dtype=np.int64)) * int(m) * int(k)
                    * int(np.shape(b.data)[-1]), a, b, added=(d,))
        return out

    def create_fmul(self, *args, **kwargs):
        hooks.watched()
        out = original["create_fmul"](self, *args, **kwargs)
        if count.counting:
            product(out, 2 * int(np.asarray(out.data).size), *hooks.leading("create_fmul", self, args, kwargs, 2))
        return out

    def create_fma(self, *args, **kwargs):
        hooks.watched()
        out = original["create_fma"](self, *args, **kwargs)
        if count.counting:
            a, b, c = hooks.leading("create_fma", self, args, kwargs, 3)
            product(out, 2 * int(np.asarray(out.data).size), a, b, added=(c,))
        return out

    return {"create_dot": create_dot, "create_fmul": create_fmul, "create_fma": create_fma}


def _launch(hooks):
    """The wrappers of a launch and what it runs: the grid's programs counted, the launched tensors'
    memory noted for the bounds (GridExecutor.__call__), a kernel's body held to what Triton's GPU
    compiler accepts before it first runs (InterpretedFunction.run), and a @triton.jit function called
    inside a kernel (InterpretedFunction.__call__).  {(owner, name): wrapper}."""
    import counter
    import gpu_compiler
    interpreter, count = hooks.interpreter, hooks.count
    original_grid, launch = hooks.originals["set_grid_idx"], interpreter.GridExecutor.__call__
    run = interpreter.InterpretedFunction.run

    def set_grid_idx(self, *args, **kwargs):
        hooks.watched()
        count.program = tuple(hooks.leading("set_grid_idx", self, args, kwargs, 3))
        if count.counting:
            count.programs += 1
        return original_grid(self, *args, **kwargs)

    def tensors_in(value):
        """The tensors a launch argument hands the kernel: itself, those in a tuple or list, a host-side
        tensor descriptor's base."""
        if hasattr(value, "untyped_storage"):
            return [value]
        if isinstance(value, (tuple, list)):
            return [tensor for item in value for tensor in tensors_in(item)]
        if isinstance(value, interpreter.TensorDescriptor):
            return tensors_in(value.base)
        return []

    def grid_executor_call(self, *args, **kwargs):
        tensors = [tensor for arg in (*args, *kwargs.values()) for tensor in tensors_in(arg)]
        ranges = []
        for tensor in tensors:
            storage = tensor.untyped_storage()
            ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        outer, count.ranges = count.ranges, ranges
        if count.counting:
            for tensor in tensors:   # what the call was given or its counted operators made (counter.admit)
                counter.admit(tensor)
            counter.bring([arg for arg in (*args, *kwargs.values()) if type(arg) in (int, float)])   # its numbers
            count.launches += 1
            count.launched.update(tensor.untyped_storage().data_ptr() for tensor in tensors)
        try:
            return launch(self, *args, **kwargs)
        finally:
            count.ranges = outer

    def interpreted_run(self, *args, grid, warmup, **kwargs):
        hooks.watched()
        if not warmup:
            gpu_compiler.check(self, args, kwargs)   # the body must be Triton that a GPU compiles
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    return {(hooks.builder, "set_grid_idx"): set_grid_idx, (interpreter.GridExecutor, "__call__"): grid_executor_call,
            (interpreter.InterpretedFunction, "run"): interpreted_run,
            (interpreter.InterpretedFunction, "__call__"): _device_call(hooks)}


def _device_call(hooks):
    """A @triton.jit function called inside a kernel.  The interpreter patches triton.language again at
    every such call (tl.max, tl.sum: once a program), and never undoes it: most of a small kernel's
    time.  The patches it made at a call are noted; while every one of them is still in place, a later
    call of a function with the same globals patches nothing again (the same patches, already made)."""
    interpreter, patched = hooks.interpreter, {}

    def device_call(self, *args, **kwargs):
        hooks.watched()
        made = patched.get(id(self.fn.__globals__))
        if made is None or not all(owner.__dict__.get(name) is value for owner, name, value in made):
            scope = interpreter._patch_lang(self.fn)
            changes = getattr(scope, "_changes", None)
            if changes is not None:
                patched[id(self.fn.__globals__)] = [(owner, name, owner.__dict__.get(name)) for owner, name, _ in changes]
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            raise interpreter.InterpreterError(repr(error)) from error
    return device_call


def _refused(hooks):
    """Deny by default: an operation of the interpreter that reaches memory itself and is not counted
    (a Triton other than the one this was written for) is refused where a kernel uses it, and one
    outside the builder stops the installation.  {name: refusal} on the builder."""
    refused = {}
    for qualified in memory_operations(hooks.interpreter, hooks.interpreter._interpreter):
        owner, name = qualified.split(".", 1) if "." in qualified else ("", qualified)
        if owner == "InterpreterBuilder" and name in COUNTED:
            continue
        if owner != "InterpreterBuilder":
            raise Uncounted(f"Triton's interpreter reaches memory in {qualified}, outside the builder operations "
                            "the grader counts: the kernel track cannot count this Triton's kernels")
        refused[name] = refusal(name)
    return refused


def _routing(hooks, operation):
    """An operation that reaches memory through the counted ones may hand them new handles made from its
    arguments (a descriptor's scatter stores row by row): while it runs, what its arguments carry is
    carried by whatever it stores; its result carries it too, as any operation's does."""
    count = hooks.count

    def routing(self, *args, **kwargs):
        hooks.watched()
        outer = count.routed
        given = hooks.carried(args) | hooks.carried(tuple(kwargs.values()))
        count.routed = outer | given
        try:
            out = operation(self, *args, **kwargs)
        finally:
            count.routed = outer
        if given:
            hooks.carry(out, given)
        return out
    return routing


def _carrying(hooks):
    """Every other operation's result carries the products its operands carried (a product counts in
    `flops` only if a store takes a value that carries it), as do the interpreter's reductions.  These
    wrappers are put in place for a counted call only (Tally), so that no other call pays for them:
    ([(owner, name, operation)], [(owner, name, its carrying wrapper)])."""
    interpreter, builder = hooks.interpreter, hooks.builder
    plain = [(builder, name, operation) for name, operation in list(vars(builder).items())
             if name.startswith("create_") and name not in hooks.originals and (builder, name) not in hooks.wrappers
             and callable(operation)]
    plain.append((interpreter.ReduceScanOpInterface, "apply", interpreter.ReduceScanOpInterface.apply))
    return plain, [(owner, name, _carrier(hooks, operation)) for owner, name, operation in plain]


def _carrier(hooks, operation):
    """operation, its result carrying what its operands carry (tl.where: _selecting)."""
    if operation.__name__ == "<lambda>" and operation is vars(hooks.builder).get("create_select"):
        return _selecting(hooks, operation)
    handle_type, carried, carry = hooks.handle_type, hooks.carried, hooks.carry

    def wrapper(*args, **kwargs):
        out = operation(*args, **kwargs)
        products = _NONE
        for arg in args[1:]:    # (the first is the builder, or the reduction)
            found = arg._products if type(arg) is handle_type else carried(arg)
            if found:
                products = products | found
        if kwargs:
            products = products | carried(tuple(kwargs.values()))
        if products:
            carry(out, products)
        return out
    wrapper.__name__ = wrapper.__qualname__ = operation.__name__
    return wrapper


def _selecting(hooks, operation):
    """tl.where: the result carries what its condition carries, and each branch's products only where
    some lane chooses that branch."""
    import numpy as np

    def create_select(self, cond, lhs, rhs):
        out = operation(self, cond, lhs, rhs)
        chosen = np.broadcast_to(np.asarray(cond.data, dtype=bool), np.shape(out.data))
        products = hooks.carried(cond)
        if chosen.any():
            products = products | hooks.carried(lhs)
        if not chosen.all():
            products = products | hooks.carried(rhs)
        if products:
            hooks.carry(out, products)
        return out
    return create_select


def _install():
    """Put the wrappers in place (memory, arithmetic, the launch; the refusals and the routing of the
    deny by default; the carrying ones, switched on per counted call).  Returns (begin, end, intact)
    for Tally."""
    from triton.runtime import interpreter

    # The interpreter checks every int32 sum and product for overflow by default; a kernel compiled for
    # a GPU does not (outside Triton's debug mode). Without the check the kernels run as they would
    # there, and about a quarter faster.
    shared = interpreter.interpreter_builder
    shared.options = dataclasses.replace(shared.options, sanitize_overflow=False)
    hooks = Hooks(interpreter)
    launching = _launch(hooks)                        # taken before any wrapper is in place
    for name, refused in _refused(hooks).items():
        hooks.put(hooks.builder, name, refused)
    for name in routed_operations(hooks.builder):
        hooks.put(hooks.builder, name, _routing(hooks, vars(hooks.builder)[name]))
    plain, carrying = _carrying(hooks)
    for name, wrapper in {**_memory(hooks), **_arithmetic(hooks)}.items():
        hooks.put(hooks.builder, name, wrapper)
    for (owner, name), wrapper in launching.items():
        hooks.put(owner, name, wrapper)
    return _tallying(hooks, plain, carrying)


def _tallying(hooks, plain, carrying):
    """(begin, end, intact): a counted call's start and end, and whether the wrappers stayed whole."""
    import numpy as np
    count = hooks.count

    def switch_carrying(on):
        for owner, name, operation in carrying if on else plain:
            setattr(owner, name, operation)

    def begin():
        start = {name: getattr(count, name) for name in FIELDS}
        count.read, count.stored, count.products, count.stored_products = [], [], {}, set()
        count.launched = set()
        count.counting = True
        switch_carrying(True)
        return start

    def end(start):
        """(counts, written, launched, stored) since begin() gave `start`: flops, the products whose
        results reached a store; flops_made, every product made; written, the addresses stored to;
        launched, the storages the kernels were launched on; stored, the last value a tl.store left at
        each address it wrote ({address: value}; an atomic's address maps to None)."""
        count.counting = False
        switch_carrying(False)
        counts = {name: getattr(count, name) - start[name] for name in FIELDS}
        counts["flops_made"] = counts["flops"]
        counts["flops"] = sum(count.products[index] for index in count.stored_products)
        count.products, count.stored_products = {}, set()
        read, written = count.read, [lanes for lanes, _ in count.stored]   # stores' and atomics' lanes
        counts["distinct"] = int(np.unique(np.concatenate(read)).size) if read else 0
        written = np.unique(np.concatenate(written)) if written else np.zeros(0, dtype=np.uint64)
        count.read = []
        launched, count.launched = count.launched, set()
        stored = {}
        for lanes, values in count.stored:
            stored.update(zip(lanes.tolist(), values.tolist() if values is not None else [None] * lanes.size))
        count.stored = []
        return counts, written, launched, stored

    def intact():
        """Whether every wrapper is in place and none was ever seen replaced."""
        return hooks.in_place() and not count.replaced

    return begin, end, intact


# Set by prepare() where the interpreter runs the kernels; elsewhere nothing is installed to count with.
_begin = _end = _intact = _storages = _own_array = None


class Tally:
    """with Tally() as tally: ...the student's call...; then tally.counts (what the call's kernels did,
    all zero on the CUDA device), tally.intact, and after note_call, tally.output_stored and
    tally.foreign_tensors."""

    def __enter__(self):
        self.start = _begin() if INTERPRETED else None
        return self

    def __exit__(self, *exc):
        import numpy as np
        if INTERPRETED:
            self.counts, self.written, self.launched, self.stored = _end(self.start)
            self.intact = _intact()
        else:
            self.counts = {name: 0 for name in (*FIELDS, "flops_made", "distinct")}
            self.written, self.launched, self.intact, self.stored = np.zeros(0, dtype=np.uint64), set(), True, {}
        self.output_stored = self.foreign_tensors = None
        return False

    def note_call(self, output, arguments, made=None):
        """In Triton's interpreter, after the call: output_stored, the share of the elements of the
        tensors it returned (a tensor, or a tuple or list of them) that a kernel stored during it and
        that still hold what it stored (None when it returned none: an element the wrapper wrote over
        afterwards, in place, is not the kernel's); and, where the count saw what torch allocated during the call (`made`,
        counter.Counted's storages), foreign_tensors: how many of the tensors its kernels were launched
        on are neither among the call's `arguments` (or views of them) nor so allocated, a tensor
        prepared before the call."""
        if not INTERPRETED:
            return
        import numpy as np
        import torch

        if made is not None:
            self.foreign_tensors = len(self.launched - _storages(arguments) - made)
        tensors = [output] if isinstance(output, torch.Tensor) else \
            [item for item in output if isinstance(item, torch.Tensor)] if isinstance(output, (tuple, list)) else []
        stored = total = 0
        for tensor in tensors:
            if tensor.device.type != "cpu" or tensor.numel() == 0:
                continue
            storage = tensor.untyped_storage()
            index = torch.as_strided(torch.arange(storage.nbytes() // tensor.element_size()), tensor.shape,
                                     tensor.stride(), tensor.storage_offset())
            where = np.uint64(storage.data_ptr()) + _own_array(index).astype(np.uint64).ravel() * np.uint64(tensor.element_size())
            kept = np.isin(where, self.written)
            size = tensor.element_size()
            bits = _own_array(tensor.detach().reshape(-1).contiguous().view(torch.uint8)).view(f"u{size}")
            for position in np.flatnonzero(kept):
                value = self.stored.get(int(where[position]))
                if value is not None and value < (1 << (8 * size)) and int(bits[position]) != value:
                    kept[position] = False   # written over after the kernel stored it
            stored += int(kept.sum())
            total += where.size
        self.output_stored = stored / total if total else None
