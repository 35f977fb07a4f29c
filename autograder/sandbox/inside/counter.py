"""The work of a counted call: the floating-point operations of its products (this file runs in the
sandbox, in the warm worker, before any submission's code).

What is counted, as torch's dispatcher runs it (after torch.matmul, einsum, tensordot, nn.Linear and
@ have become the kernels below, so every way of writing a product reaches the count):

  mm, addmm, bmm, baddbmm, addbmm      2 * m * k * n per product (a multiply and an add)
  mv, addmv, dot, vdot, addr, outer    the same rule for matrix-vector and vector products
  mul, addcmul (element-wise)          2 per element of the result: the multiply and the add of the
                                       sum that turns element-wise products into a product
  _scaled_mm, _int_mm                  as mm
  convolution and its backends         torch's own formula (torch.utils.flop_counter.conv_flop_count)

Work done where torch's dispatcher does not see it is not counted, so the suites also require a count
no lower than the algorithm's own: an answer that hides its work is "far below", never "cheap".  A
tensor may not become a NumPy array while a call is counted (Tensor.numpy and __array__ raise then;
`install` wraps them in the worker before any submission's code, so a reference taken by a
submission is the wrapper); nor a Python list (Tensor.tolist, a storage's tolist, __dlpack__); nor Python
numbers one by one (Tensor.item, float(t): more than SCALAR_BUDGET of them); and the call computes on
what it was given and what its own counted operations made (provenance: NOT_SEEN, NOT_TORCHS), so work
done outside torch has no way back into the answer.  The count cannot be emptied from inside the call (it lives in this
module's closure, which the trusted side's reading of the code forbids reaching, rules.py); the
worker checks after the call that the counter is still the active mode and still counts
(`Counted.intact`), and the grader holds the child to one thread during the call (cgroup.py), so
no work moves to a thread the mode does not see.

Imports, by their own names in the sandbox: none of sandbox/inside/ (kernels.py hands itself to Work).
"""

import functools
import math
import weakref

import torch
import torch.utils.dlpack
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

__all__ = ["Work", "Counted", "NotCountable", "install", "storages", "admit", "bring", "own_array", "COSTS", "EXPONENTIALS", "FREE", "SCALAR_BUDGET"]
DEPENDS = ()   # the modules of sandbox/inside/ this one imports by name

aten = torch.ops.aten


def _shape(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def _numel(value):
    return math.prod(_shape(value))


def _matrix(a, b):
    (m, k), n = _shape(a)[-2:], _shape(b)[-1]
    batch = math.prod(_shape(a)[:-2]) if len(_shape(a)) > 2 else 1
    return 2 * batch * m * k * n


COSTS = {
    aten.mm: lambda args, out: _matrix(args[0], args[1]),
    aten.addmm: lambda args, out: _matrix(args[1], args[2]),
    aten.bmm: lambda args, out: _matrix(args[0], args[1]),
    aten.baddbmm: lambda args, out: _matrix(args[1], args[2]),
    aten.addbmm: lambda args, out: _matrix(args[1], args[2]),
    aten.mv: lambda args, out: 2 * _numel(args[0]),
    aten.addmv: lambda args, out: 2 * _numel(args[1]),
    aten.dot: lambda args, out: 2 * _numel(args[0]),
    aten.vdot: lambda args, out: 2 * _numel(args[0]),
    aten.addr: lambda args, out: 2 * _numel(out),
    aten.outer: lambda args, out: 2 * _numel(out),
    aten.mul: lambda args, out: 2 * _numel(out),
    aten.mul_: lambda args, out: 2 * _numel(out),
    aten.addcmul: lambda args, out: 2 * _numel(out),
    aten.addcmul_: lambda args, out: 2 * _numel(out),
    aten._scaled_mm: lambda args, out: _matrix(args[0], args[1]),
    aten._int_mm: lambda args, out: _matrix(args[0], args[1]),
}
# Convolutions are products too (a 1-D convolution with a kernel of 1 is a matrix product), counted
# by torch's own formula (torch.utils.flop_counter), as every convolution operator torch counts.
for _operator in (aten.convolution, aten._convolution, aten.convolution_overrideable, aten.cudnn_convolution,
                  aten._slow_conv2d_forward):
    COSTS[_operator] = lambda args, out: _convolution(args, out)


def _convolution(args, out):
    from torch.utils.flop_counter import conv_flop_count
    transposed = bool(args[6]) if len(args) > 6 and isinstance(args[6], bool) else False
    return conv_flop_count(list(_shape(args[0])), list(_shape(args[1])), list(_shape(out)), transposed)


# Exponentials: a softmax's own work.  A counted call reports how many of these torch ran (a kernel
# assignment's call must leave its softmax to its kernel).
EXPONENTIALS = {aten.exp, aten.exp_, aten.exp2, aten.exp2_, aten.expm1, aten._softmax, aten._log_softmax,
                aten.logsumexp, aten._safe_softmax, aten.softmax, aten.log_softmax, aten.sigmoid, aten.sigmoid_,
                aten.tanh, aten.tanh_}
# A number or a tensor raised to a tensor (math.e ** x, torch.pow(2, x), e_tensor ** x) is an exponential by
# another name.
EXPONENTIAL_OVERLOADS = {aten.pow.Scalar, aten.float_power.Scalar, aten.pow.Tensor_Tensor, aten.pow_.Tensor,
                         aten.float_power.Tensor_Tensor, aten.float_power_.Tensor}

# Everything else torch computes is counted too, by default: each element (floating point or integer) an
# operator outside COSTS and EXPONENTIALS produces is one unit of `elementwise` work (a division, a reciprocal, a
# sum: attention written without products or exponentials is still torch's work).  Free are only the
# operators that compute nothing: views (their result aliases an input), allocations, copies and
# conversions, and the ones that move or select elements without arithmetic.
FREE = {aten.empty, aten.empty_like, aten.empty_strided, aten.zeros, aten.zeros_like, aten.ones, aten.ones_like,
        aten.full, aten.full_like, aten.new_empty, aten.new_empty_strided, aten.new_zeros, aten.new_ones,
        aten.new_full, aten.scalar_tensor, aten.arange, aten.fill, aten.fill_, aten.zero_, aten._to_copy, aten.copy,
        aten.copy_, aten.clone, aten.lift_fresh, aten.lift_fresh_copy, aten.detach, aten.alias, aten._unsafe_view,
        aten.cat, aten.stack, aten.index, aten.index_select, aten.gather, aten.slice_scatter, aten.select_scatter,
        aten.constant_pad_nd, aten.where, aten.masked_fill, aten.masked_fill_, aten.tril, aten.triu, aten.tril_,
        aten.triu_, aten.repeat, aten.repeat_interleave, aten.flip, aten.roll, aten.expand_copy, aten._local_scalar_dense, aten.set_, aten.resize_, aten.as_strided_, aten.split_with_sizes_copy}
# Python numbers may be pulled out of a tensor a few at a time during a counted call (`if mask.any():`,
# float(x.max())), but not one by one as a way around the count: past this many, the call is refused.
SCALAR_BUDGET = 256


class NotCountable(RuntimeError):
    pass


NOT_COUNTABLE = ("a tensor was turned into a NumPy array or a Python list during a call whose work is counted: "
                 "work done on them cannot be counted, so keep the call's work in torch (or in the kernel)")
# A counted call computes on what it was given and on what its own counted operations made: provenance,
# deny by default.  Every tensor an operator is handed (or a kernel is launched on, kernels.py) must be
# one of the call's inputs (Counted's `given`: the grader's fresh copies), or made during the call by an
# operator the count saw (a factory, torch.empty, arange, ... or any computation), or a view of one of
# these.  Anything else (a tensor made from bytes, a storage set_() onto, pickle, torch.load, NumPy, a
# storage's own constructors, or a tensor kept from before the call) is numbers brought in from outside
# the count: they share SCALAR_BUDGET with the numbers taken out by item() (a small constant passes),
# and past it the call is refused (NOT_SEEN).  Whatever took the numbers out (torch.save, a file, a
# buffer), nothing made outside the count comes back in: how it was made does not matter, only that
# the count did not see it made.  Memory that code outside torch can still write during the call is
# refused whatever its size (NOT_TORCHS): memory lent to torch (a NumPy array's, a buffer's, a file's:
# torch cannot resize it), memory shared with other processes, memory torch lent out (Tensor.numpy,
# __array__ and __dlpack__ at any time before the call).  And the memory an allocation hands out
# uninitialised (torch.empty, a growing resize_) is filled before the call sees it (UNINITIALISED), so
# what NumPy left in freed memory is not read back through it.
NOT_TORCHS = ("a tensor in {why} was used during a call whose work is counted: work done on it outside torch "
              "(NumPy, a buffer, a file) cannot be counted, so keep the call's work in torch (or in the kernel), "
              "on the tensors it is given and those it makes")
TOO_MANY_NUMBERS = (f"more than {SCALAR_BUDGET} numbers moved between torch and Python during a call whose work is "
                    "counted (numbers brought in from Python by torch.tensor of a list or an array or handed to "
                    "operators one by one, or taken out by item() and float(t)): work done on them cannot be counted, "
                    "so keep the call's work in torch (or in the kernel)")
NOT_SEEN = ("a tensor of {numbers} numbers that no operation of the call made (made from bytes, a storage, a file, "
            "pickle or NumPy, or kept from before the call) was used during a call whose work is counted: work done "
            "outside torch cannot be counted, so keep the call's work in torch (or in the kernel), on the tensors "
            f"it is given and those its operations make (at most {SCALAR_BUDGET} numbers may come from elsewhere)")
# The allocations whose memory is handed out uninitialised (filled during a counted call).
UNINITIALISED = {aten.empty, aten.empty_like, aten.empty_strided, aten.new_empty, aten.new_empty_strided,
                 aten.empty_permuted, aten.resize_, aten.resize_as_}
# The ways of lending a tensor's memory to code outside torch (noted at any time, refused during a call).
LENDING = ("numpy", "__array__", "__dlpack__", "to_dlpack")
# The ways to hand a tensor's numbers to code the count does not see, refused during a counted call.
REFUSED = ((torch.Tensor, ("numpy", "__array__", "tolist", "__dlpack__")),
           (torch.UntypedStorage, ("tolist",)), (torch.TypedStorage, ("tolist",)),
           (torch, ("to_dlpack",)), (torch.utils.dlpack, ("to_dlpack",)))


@functools.lru_cache(maxsize=None)
def _aliases_an_input(func):
    """A view: the operator's result is (part of) one of its inputs, written nowhere."""
    return any(ret.alias_info is not None and not ret.alias_info.is_write for ret in func._schema.returns)


def _computed_elements(out):
    """The numbers an operator computed: every element but booleans (integer arithmetic is arithmetic)."""
    if isinstance(out, torch.Tensor):
        return out.numel() if out.dtype is not torch.bool else 0
    if isinstance(out, (tuple, list)):
        return sum(_computed_elements(item) for item in out)
    return 0


# Which of an operator's Python numbers are values brought in (as torch.tensor's are), read from its schema:
# a float anywhere, and an integer unless the argument is declared an integer that is a size, a dimension
# or a dtype: torch.arange(k), torch.full(size, k), x + k and fill_(k) bring k in, and so does a position
# (x[k], x[k:], narrow, as_strided's offset: a table indexed by k gives k back); torch.empty(k) does not.
POSITIONS = frozenset({"index", "start", "end", "storage_offset", "offset"})


@functools.lru_cache(maxsize=None)
def _value_arguments(func):
    """(positions, names) of the operator's arguments whose integers are values, not sizes or dimensions."""
    values = [(position, argument.name) for position, argument in enumerate(func._schema.arguments)
              if "int" not in str(argument.type).lower() or argument.name in POSITIONS]
    return frozenset(position for position, _ in values), frozenset(name for _, name in values)


def _brought(func, args, kwargs):
    """The Python numbers an operator's arguments bring in as values (_value_arguments)."""
    positions, names = _value_arguments(func)
    for position, value in enumerate(args):
        yield from _numbers(value, position in positions)
    for name, value in (kwargs or {}).items():
        yield from _numbers(value, name in names)


def _numbers(value, integers):
    """The Python numbers in an operator's arguments: floats, and with `integers` ints too (not bools)."""
    if type(value) is float or (integers and type(value) is int):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _numbers(item, integers)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item, integers)


def _leaves(value):
    """What an operator's arguments hold, inside their tuples, lists and dicts."""
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    else:
        yield value


def _tensors(value):
    """The tensors in an operator's arguments (in tuples, lists and dicts)."""
    return (leaf for leaf in _leaves(value) if isinstance(leaf, torch.Tensor))


def _make():
    total, exponentials, elementwise, scalars, counting, made = [0], [0], [0], [0], [False], [None]
    lent = {}   # storage address -> weak reference to the storage torch lent out there
    brought = set()   # the distinct Python numbers operators were handed during the call
    seen = {}   # id(storage) -> (weak reference, address): what the call may read (given, or made in it)

    def outside(tensor):
        """Where a tensor's memory is, when code outside torch can write it ("" when it cannot)."""
        if tensor.device.type != "cpu":
            return ""
        storage = _storage(tensor)
        if storage is None:
            return ""
        if storage.is_shared():
            return "shared memory"
        if not storage.resizable():
            return "memory torch did not allocate (a NumPy array's, a buffer's or a file's)"
        holder = lent.get(storage.data_ptr())
        if holder is not None and holder() is storage:
            return "memory handed to NumPy or DLPack before the call"
        return ""

    def lend(tensor):
        if len(lent) > 4096:
            for address in [address for address, holder in lent.items() if holder() is None]:
                del lent[address]
        try:
            storage = tensor.untyped_storage()
            lent[storage.data_ptr()] = weakref.ref(storage)
        except (RuntimeError, NotImplementedError, TypeError):
            pass

    def is_seen(storage):
        """The same storage object, still at the address it had when the count saw it made or given (a
        storage moved or swapped under it since, outside the count, is not)."""
        entry = seen.get(id(storage))
        return entry is not None and entry[0]() is storage and entry[1] == storage.data_ptr()

    def see(storage):
        try:
            seen[id(storage)] = (weakref.ref(storage), storage.data_ptr())
        except TypeError:   # a storage that takes no weak reference is never seen
            pass

    def give(values):
        """The call's inputs (and with a module's step, the module's own tensors): readable from the start."""
        seen.clear()
        for tensor in _tensors(values):
            storage = _storage(tensor)
            if storage is not None:
                see(storage)

    def charge(numbers, message):
        scalars[0] += numbers
        if scalars[0] + len(brought) > SCALAR_BUDGET:
            raise NotCountable(message)

    def bring(values):
        """Python numbers handed to a kernel's launch during a counted call (kernels.py): brought in, as an
        operator's are."""
        if counting[0]:
            brought.update(_numbers(values, True))
            charge(0, TOO_MANY_NUMBERS)

    def admit(tensor, message=None):
        """A tensor handed to an operator or a kernel during a counted call: refused when code outside
        torch can write its memory; one the count did not see given or made is numbers brought in from
        outside, charged (then seen), refused past SCALAR_BUDGET."""
        if not counting[0]:
            return
        why = outside(tensor)
        if why:
            raise NotCountable(NOT_TORCHS.format(why=why))
        storage = _storage(tensor)
        if storage is None or storage.nbytes() == 0 or is_seen(storage):
            return
        numbers = max(1, storage.nbytes() // max(1, tensor.element_size()))
        charge(numbers, message or NOT_SEEN.format(numbers=numbers))
        see(storage)

    def check_memory(func, args, kwargs):
        """Before an operator runs: what it is handed (admit), and the numbers brought in or taken out.
        Returns the storages handed to it as storages that the count did not see (set_), whose tensors the
        operator's result does not make seen."""
        lifted = func.overloadpacket is aten.lift_fresh   # numbers brought in from Python (torch.tensor)
        for tensor in _tensors((args, kwargs)):
            admit(tensor, TOO_MANY_NUMBERS if lifted else None)
        if func.overloadpacket is aten._local_scalar_dense:   # a number taken out to Python
            charge(1, TOO_MANY_NUMBERS)
        # Numbers handed to an operator one call at a time (out[i].fill_(v), x + v): the distinct ones count
        # (a scale, -inf or 0 used again and again is one number).
        brought.update(_brought(func, args, kwargs))
        charge(0, TOO_MANY_NUMBERS)
        return {id(storage) for storage in _storages_in((args, kwargs)) if not is_seen(storage)}

    def note_seen(func, args, kwargs, out, unseen, before):
        """After an operator ran in a counted call: what it made is seen (its results' storages, but for
        one handed to it as an unseen storage), and memory it allocated uninitialised is filled."""
        for tensor in _tensors(out):
            storage = _storage(tensor)
            if storage is None or id(storage) in unseen:
                continue
            if func.overloadpacket in UNINITIALISED and storage.nbytes() > before.get(id(storage), 0):
                _fill(storage, before.get(id(storage), 0), tensor.dtype)
            see(storage)

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            unseen = before = None
            if counting[0]:
                unseen = check_memory(func, args, kwargs)
                if func.overloadpacket in UNINITIALISED:   # the sizes of what a resize_ may grow
                    before = {id(storage): storage.nbytes() for storage in map(_storage, _tensors(args))
                              if storage is not None}
            out = func(*args, **(kwargs or {}))
            if unseen is not None:
                note_seen(func, args, kwargs, out, unseen, before or {})
            if made[0] is not None:
                _note_made(func, args, kwargs, out, made[0])
            cost = COSTS.get(func.overloadpacket)
            if func.overloadpacket in EXPONENTIALS or func in EXPONENTIAL_OVERLOADS:
                exponentials[0] += 1
            elif cost is not None:
                try:
                    total[0] += int(cost(args, out))
                except (TypeError, ValueError, IndexError):
                    elementwise[0] += _computed_elements(out)   # charged, not ignored
            elif func.overloadpacket not in FREE and not _aliases_an_input(func):
                elementwise[0] += _computed_elements(out)
            return out

    def read():
        return total[0]

    def read_elementwise():
        return elementwise[0]

    def take_made(track):
        """The storages noted since the last take; track: whether to note them from now on."""
        taken, made[0] = made[0] or set(), (set() if track else None)
        return taken

    def read_exponentials():
        return exponentials[0]

    def switch(on, given=()):
        counting[0] = on
        scalars[0] = 0
        brought.clear()
        give(given if on else ())

    def refusing(original, lends):
        def wrapper(self, *args, **kwargs):
            if counting[0]:
                raise NotCountable(NOT_COUNTABLE)
            if lends:
                lend(self)
            return original(self, *args, **kwargs)
        wrapper.__name__ = wrapper.__qualname__ = original.__name__
        wrapper.__doc__ = original.__doc__
        return wrapper

    def install():
        for owner, names in REFUSED:
            for name in names:
                original = getattr(owner, name)
                originals[owner, name] = original
                setattr(owner, name, refusing(original, name in LENDING))

    originals = {}

    def own_array(tensor):
        """The grader's own NumPy view of a tensor (kernels.Tally.note_call), not noted as lent."""
        return originals.get((torch.Tensor, "numpy"), torch.Tensor.numpy)(tensor)

    return Counting, read, read_exponentials, read_elementwise, switch, install, take_made, admit, bring, own_array


def _storage(value):
    """The untyped storage of a tensor or a storage (None for a tensor without one)."""
    try:
        if isinstance(value, torch.Tensor):
            return value.untyped_storage()
        return value.untyped() if isinstance(value, torch.TypedStorage) else value
    except (RuntimeError, NotImplementedError):
        return None


def _storages_in(value):
    """The storages handed to an operator as storages (set_'s source), in tuples, lists and dicts."""
    for leaf in _leaves(value):
        if isinstance(leaf, (torch.UntypedStorage, torch.TypedStorage)) and (found := _storage(leaf)) is not None:
            yield found


def _fill(storage, start, dtype):
    """Memory an allocation handed out uninitialised, from byte `start` on, filled as torch's own
    fill_uninitialized_memory does (floating point NaN; here every byte 0xff, booleans true)."""
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    flat[start:].fill_(1 if dtype is torch.bool else 255)


def storages(values):
    """The addresses of the storages of the tensors in values (in lists, tuples and dicts)."""
    found = set()
    for value in values:
        if isinstance(value, torch.Tensor):
            found.add(value.untyped_storage().data_ptr())
        elif isinstance(value, (tuple, list)):
            found |= storages(value)
        elif isinstance(value, dict):
            found |= storages(value.values())
    return found


def _note_made(func, args, kwargs, out, made):
    """The storages an operator allocated (not a view of, or written into, one of its inputs; a tensor
    made from Python numbers, torch.tensor, comes through lift_fresh)."""
    try:
        outputs = storages(out if isinstance(out, (tuple, list)) else (out,))
        if func.overloadpacket is not aten.lift_fresh:
            outputs -= storages((args, kwargs or {}))
        made |= outputs
    except (RuntimeError, NotImplementedError):   # a tensor without storage
        pass


_Counting, _read, _read_exponentials, _read_elementwise, _switch, install, _take_made, admit, bring, own_array = _make()


class Counted:
    """with Counted().on(inputs) as counted: ...the student's call...; then counted.flops,
    counted.exponentials (torch's exp and softmax operators run) and counted.intact (entered several
    times, it adds up the calls).  `on` names what the call is given (tensors, in lists, tuples and
    dicts): the only tensors it may read beside those its own operators make (NOT_SEEN)."""

    def __init__(self, allocations=False):
        # A dispatch mode's first entry imports torch's dynamo stack (torch._dynamo, about a second), which fails
        # as a circular import when it first happens inside the mode: imported here, before the call
        # and its time limit (the warm worker has usually done it already: worker.warm_dynamo).
        import torch._dynamo  # noqa: F401
        self.flops, self.exponentials, self.elementwise, self.intact, self.made = 0, 0, 0, True, set()
        self.allocations = allocations   # also note the storages torch allocates (a kernel assignment's call)
        self.given = ()

    def on(self, *given):
        """What the next entry's call is given."""
        self.given = given
        return self

    def __enter__(self):
        self.mode = _Counting()
        self.start, self.start_exponentials, self.start_elementwise = _read(), _read_exponentials(), _read_elementwise()
        _take_made(track=self.allocations)
        self.mode.__enter__()
        _switch(True, self.given)
        return self

    def __exit__(self, *exc):
        _switch(False)
        stack = _get_current_dispatch_mode_stack()
        on_top = bool(stack) and stack[-1] is self.mode
        self.flops += _read() - self.start
        self.exponentials += _read_exponentials() - self.start_exponentials
        self.elementwise += _read_elementwise() - self.start_elementwise
        self.made |= _take_made(track=False)   # the storages torch allocated during the call
        probe = torch.ones(2, 2, dtype=torch.float64)
        before = _read()
        torch.mm(probe, probe)
        still_counts = _read() - before == 16
        try:
            self.mode.__exit__(*exc)
        except Exception:  # noqa: BLE001 - the stack was changed under the mode; it is not intact
            on_top = False
        self.intact = self.intact and on_top and still_counts
        return False


class Work:
    """The one count of a counted call's work, as every counted reply carries it:

        with Work(kernels).on(inputs) as work: ...the student's call (or a module's counted steps)...
        reply["work"] = work.reply(output, arguments)

    torch's share is counted by the dispatch mode above (`Counted`); with `kernels` (the kernels.py
    module, in a kernel assignment's child) the kernels' share too (`kernels.Tally`).  The reply
    (the trusted side's replies.py checks it, the suites read it as a `replies.Work`):

      intact          every count was whole through the call: torch's mode still on top and counting,
                      every interpreter wrapper in place and never seen replaced
      torch_flops     the products torch's dispatcher ran (COSTS), exponentials: its exp and softmax
                      operators (EXPONENTIALS, EXPONENTIAL_OVERLOADS)
      torch_elementwise  the elements every other operator torch ran produced (booleans aside), unless it
                      is FREE (a view, an allocation, a copy, a selection): complete by default
      kernels         whether the kernels' share was counted; then interpreted (False on the CUDA
                      device, where it is not counted: all zero), launches, programs, addressed,
                      distinct, idle_loads, kernel_flops (products whose results reached a store),
                      kernel_flops_made (every product made), output_stored, foreign_tensors (see
                      kernels.py)

    Entered several times (a module's counted steps), it adds up the calls."""

    def __init__(self, kernels=None):
        self.kernels = kernels
        self.torch = Counted(allocations=kernels is not None)
        self.tally = None

    def on(self, *given):
        """What the next entry's call is given (Counted.on): its inputs, and a module's own tensors."""
        self.torch.on(*given)
        return self

    def __enter__(self):
        self.torch.__enter__()
        if self.kernels is not None:
            self.tally = self.kernels.Tally().__enter__()
        return self

    def __exit__(self, *exc):
        if self.tally is not None:
            self.tally.__exit__(*exc)
        return self.torch.__exit__(*exc)

    def reply(self, output=None, arguments=()):
        reply = {"intact": bool(self.torch.intact), "torch_flops": int(self.torch.flops),
                 "torch_elementwise": int(self.torch.elementwise),
                 "exponentials": int(self.torch.exponentials), "kernels": self.tally is not None}
        if self.tally is not None:
            self.tally.note_call(output, arguments, self.torch.made)
            counts = self.tally.counts
            reply.update(intact=reply["intact"] and bool(self.tally.intact),
                         interpreted=bool(self.kernels.INTERPRETED),
                         **{name: int(counts[name])
                            for name in ("launches", "programs", "addressed", "distinct", "idle_loads")},
                         kernel_flops=int(counts["flops"]), kernel_flops_made=int(counts["flops_made"]),
                         output_stored=self.tally.output_stored, foreign_tensors=self.tally.foreign_tensors)
        return reply
