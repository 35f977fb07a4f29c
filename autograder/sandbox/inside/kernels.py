"""Triton kernels on a machine without a GPU, and what a kernel launch did (this file runs in the
sandbox, in the warm worker, before any submission's code).

`prepare()` imports Triton once, in the warm worker: as it starts, when the grader starts it for an
assignment with `kernels: triton` (course.yml), or else the first time such a submission is forked.
Without a CUDA device Triton runs every @triton.jit kernel in its interpreter (TRITON_INTERPRET=1):
the same kernel code, one program after another, each tl operation a NumPy operation.  Its caches go
to the scratch space.

`prepare()` also wraps the interpreter's memory and arithmetic operations, so that a call made under
`Tally` (which counter.Work enters for a counted call) reports what its kernels did, counted where
the kernel runs and not taken from the answer; the count lives in the closure of the wrappers, as
counter.py's does:

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
"""

import os

INTERPRETED = None      # True: Triton's interpreter; False: compiled for the CUDA device
_NONE = frozenset()
FIELDS = ("launches", "programs", "addressed", "idle_loads", "flops")
# The interpreter's builder operations that reach memory themselves, each counted by a wrapper; every
# other way a kernel reaches memory goes through them (memory_operations finds any that does not).
COUNTED = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
# The functions of the interpreter's native module known to touch no memory (every other one does).
NATIVE_ARITHMETIC = frozenset({"fma_fp32", "fma_fp64"})


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
    global INTERPRETED, _begin, _end, _intact, _storages
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
    _storages = counter.storages   # held here: the grader's modules leave sys.modules in a child


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
    _warm_compiler()
    # autograd's thread for the device starts at the first backward pass: start it now, so that the
    # threads the grader notes before the submission's code (student.StudentProcess) include it.
    x = torch.ones(2, device="cuda", requires_grad=True)
    (2 * x).sum().backward()
    torch.cuda.synchronize()


def _warm_compiler():
    """Compile and run one small kernel, so that Triton's compiler is loaded and set up before the
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


def _install():
    """Put the wrappers in place; the tally's state lives in this function's closure (as counter.py's
    count does), out of reach of any module attribute.  Returns (begin, end, intact) for Tally."""
    import dataclasses
    import inspect

    import numpy as np
    from triton.runtime import interpreter

    import gpu_compiler

    # The interpreter checks every int32 sum and product for overflow by default; a kernel compiled for
    # a GPU does not (outside Triton's debug mode). Without the check the kernels run as they would
    # there, and about a quarter faster.
    shared = interpreter.interpreter_builder
    shared.options = dataclasses.replace(shared.options, sanitize_overflow=False)
    builder = interpreter.InterpreterBuilder
    originals = {"create_masked_load": builder.create_masked_load, "create_masked_store": builder.create_masked_store,
                 "create_dot": builder.create_dot, "create_fmul": builder.create_fmul, "create_fma": builder.create_fma,
                 "set_grid_idx": builder.set_grid_idx, "create_atomic_rmw": builder.create_atomic_rmw,
                 "create_atomic_cas": builder.create_atomic_cas}
    launch = interpreter.GridExecutor.__call__
    run = interpreter.InterpretedFunction.run

    state = {"counting": False, "launches": 0, "programs": 0, "addressed": 0, "idle_loads": 0, "flops": 0,
             "ranges": [], "program": (0, 0, 0), "read": [], "stored": [], "replaced": False,
             "products": {}, "stored_products": set(), "launched": set(), "routed": _NONE}
    wrappers = {}
    carrying_sets = {}   # "plain" and "carrying": (owner, name, operation) of the operations that pass products on

    def in_place():
        """Whether every wrapper is in place now."""
        return all(owner.__dict__.get(name) is wrapper for (owner, name), wrapper in wrappers.items())

    def watched():
        """Called by every wrapper, every time: a wrapper found missing while another runs (one
        replaced during a call, put back before it returns) is noted for good."""
        if not in_place():
            state["replaced"] = True

    def reach(self, ptrs, mask, what):
        """Raise OutOfBounds when an unmasked lane of ptrs lies outside every launched tensor; the
        addresses of the unmasked lanes otherwise."""
        where = np.asarray(ptrs.data, dtype=np.uint64)
        lanes = where[np.broadcast_to(np.asarray(mask.data, dtype=bool), where.shape)] if mask is not None else where
        ranges = state["ranges"]
        if lanes.size == 0:
            return lanes.ravel()
        size = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        inside = np.zeros(lanes.shape, dtype=bool)
        for low, high in ranges:
            inside |= (lanes >= np.uint64(low)) & (lanes + np.uint64(size) <= np.uint64(high))
        if not inside.all():
            outside = int((~inside).sum())
            raise OutOfBounds(f"{what} of program {state['program']} reaches {outside} element(s) outside every "
                              f"tensor passed to the kernel: a lane past the end of a tensor that no mask covers")
        return lanes.ravel()

    # The wrappers take the arguments the interpreter passes, by position or by keyword (a descriptor's
    # load passes cache_policy and is_volatile by keyword), read the leading ones they count, and pass
    # them all on as they came.
    signatures = {name: inspect.signature(operation) for name, operation in originals.items()}

    def leading(name, self, args, kwargs, count):
        """The first `count` parameters of the interpreter's operation `name` as this call gives them."""
        if len(args) >= count:
            return args[:count]
        bound = signatures[name].bind(self, *args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.arguments.values())[1:count + 1]

    def create_masked_load(self, *args, **kwargs):
        watched()
        ptrs, mask = leading("create_masked_load", self, args, kwargs, 2)
        lanes = reach(self, ptrs, mask, "tl.load")
        if state["counting"]:
            state["addressed"] += int(lanes.size)
            state["idle_loads"] += int(lanes.size == 0 and np.size(ptrs.data) > 0)
            state["read"].append(lanes)
        return originals["create_masked_load"](self, *args, **kwargs)

    def lanes_of(value, ptrs, mask):
        """The value's elements at the unmasked lanes, in the order reach() gives their addresses."""
        data = np.broadcast_to(np.asarray(value.data), np.shape(ptrs.data))
        return data[np.broadcast_to(np.asarray(mask.data, dtype=bool), data.shape)] if mask is not None else data.ravel()

    def write(self, ptrs, value, mask, what, adds=False):
        """A store's or atomic's unmasked lanes: held to the launch's tensors, and noted while counting
        (with the products whose results the stored value carries: none when it adds only zeros, which
        change nothing).  A store's values are kept, so that what the call returns can be held to them."""
        watched()
        lanes = reach(self, ptrs, mask, what)
        if state["counting"]:
            values = lanes_of(value, ptrs, mask)
            if not (adds and values.size and not np.any(values)):
                state["stored_products"] |= carried(value) | state["routed"]
            kept = None if adds or what != "tl.store" else np.ascontiguousarray(values).view(f"u{values.itemsize}").copy()
            state["stored"].append((lanes, kept))   # the bits each lane stored (bfloat16 is uint16 here)

    def create_masked_store(self, *args, **kwargs):
        ptrs, value, mask = leading("create_masked_store", self, args, kwargs, 3)
        write(self, ptrs, value, mask, "tl.store")
        return originals["create_masked_store"](self, *args, **kwargs)

    # Atomic operations read and write memory too: held to the same bounds, their writes noted (what
    # they leave there is not theirs alone: their values are not kept).
    def create_atomic_rmw(self, *args, **kwargs):
        operation, ptrs, value, mask = leading("create_atomic_rmw", self, args, kwargs, 4)
        write(self, ptrs, value, mask, "an atomic operation", adds="ADD" in str(operation).upper())
        return originals["create_atomic_rmw"](self, *args, **kwargs)

    def create_atomic_cas(self, *args, **kwargs):
        ptrs, _, value = leading("create_atomic_cas", self, args, kwargs, 3)
        write(self, ptrs, value, None, "tl.atomic_cas")
        return originals["create_atomic_cas"](self, *args, **kwargs)

    def product(out, flops, *factors, added=()):
        """Note a product's FLOPs; its result carries them, with what its operands carried, until a store.
        A factor that is all zeros makes a result that depends on none of them: it carries only what is
        added to it (an fma's or a dot's accumulator)."""
        state["flops"] += flops
        made = state["products"]
        made[len(made)] = flops
        if any(not np.any(np.asarray(factor.data)) for factor in factors):
            out._products = _NONE.union(*(carried(operand) for operand in added))
        else:
            out._products = frozenset((len(made) - 1,)).union(*(carried(operand) for operand in (*factors, *added)))
        return out

    def create_dot(self, *args, **kwargs):
        watched()
        out = originals["create_dot"](self, *args, **kwargs)
        if state["counting"]:
            a, b, d = leading("create_dot", self, args, kwargs, 3)
            m, k = np.shape(a.data)[-2:]
            product(out, 2 * int(np.prod(np.shape(a.data)[:-2], dtype=np.int64)) * int(m) * int(k)
                    * int(np.shape(b.data)[-1]), a, b, added=(d,))
        return out

    def create_fmul(self, *args, **kwargs):
        watched()
        out = originals["create_fmul"](self, *args, **kwargs)
        if state["counting"]:
            product(out, 2 * int(np.asarray(out.data).size), *leading("create_fmul", self, args, kwargs, 2))
        return out

    def create_fma(self, *args, **kwargs):
        watched()
        out = originals["create_fma"](self, *args, **kwargs)
        if state["counting"]:
            a, b, c = leading("create_fma", self, args, kwargs, 3)
            product(out, 2 * int(np.asarray(out.data).size), a, b, added=(c,))
        return out

    def set_grid_idx(self, *args, **kwargs):
        watched()
        state["program"] = tuple(leading("set_grid_idx", self, args, kwargs, 3))
        if state["counting"]:
            state["programs"] += 1
        return originals["set_grid_idx"](self, *args, **kwargs)

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
        outer = state["ranges"]
        state["ranges"] = ranges
        if state["counting"]:
            state["launches"] += 1
            state["launched"].update(tensor.untyped_storage().data_ptr() for tensor in tensors)
        try:
            return launch(self, *args, **kwargs)
        finally:
            state["ranges"] = outer

    # Deny by default: an operation of the interpreter that reaches memory itself and is not counted above
    # (a Triton other than the one this was written for) is refused where a kernel uses it.
    for qualified, operation in memory_operations(interpreter, interpreter._interpreter).items():
        owner, name = qualified.split(".", 1) if "." in qualified else ("", qualified)
        if owner == "InterpreterBuilder" and name in COUNTED:
            continue
        if owner != "InterpreterBuilder":
            raise Uncounted(f"Triton's interpreter reaches memory in {qualified}, outside the builder operations "
                            "the grader counts: the kernel track cannot count this Triton's kernels")
        setattr(builder, name, refusal(name))
        wrappers[(builder, name)] = vars(builder)[name]

    # An operation that reaches memory through the counted ones may hand them new handles made from its
    # arguments (a descriptor's scatter stores row by row): while it runs, what its arguments carry is
    # carried by whatever it stores; its result carries it too, as any operation's does.
    def routing(operation):
        def wrapper(self, *args, **kwargs):
            watched()
            outer = state["routed"]
            given = carried(args) | carried(tuple(kwargs.values()))
            state["routed"] = outer | given
            try:
                out = operation(self, *args, **kwargs)
            finally:
                state["routed"] = outer
            if given:
                carry(out, given)
            return out
        wrapper.__name__ = wrapper.__qualname__ = operation.__name__
        return wrapper

    for name in routed_operations(builder):
        setattr(builder, name, routing(vars(builder)[name]))
        wrappers[(builder, name)] = vars(builder)[name]

    # The interpreter patches triton.language again at every call of a @triton.jit function inside a
    # kernel (tl.max, tl.sum: once a program), and never undoes it: most of a small kernel's time.  The
    # patches it made at a call are noted; while every one of them is still in place, a later call of
    # a function with the same globals patches nothing again (the same patches, already made).
    patched = {}

    def device_call(self, *args, **kwargs):
        watched()
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

    # Every other operation's result carries the products its operands carried (a product counts in
    # `flops` only if a store takes a value that carries it), as do the interpreter's reductions.
    handle_type = interpreter.TensorHandle
    handle_type._products = _NONE     # what a handle carries unless an operation gave it more

    def carried(value):
        if type(value) is handle_type:
            return value._products
        if isinstance(value, (tuple, list)):
            return _NONE.union(*(carried(item) for item in value))
        return getattr(getattr(value, "handle", None), "_products", _NONE)   # a tl.tensor

    def carry(out, products):
        for item in out if isinstance(out, (tuple, list)) else (out,):
            handle = item if type(item) is handle_type else getattr(item, "handle", None)
            if type(handle) is handle_type:
                handle._products = handle._products | products

    def carrying(operation):
        if operation.__name__ == "<lambda>" and operation is vars(builder).get("create_select"):
            return selecting(operation)

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

    def selecting(operation):
        """tl.where: the result carries what its condition carries, and each branch's products only where
        some lane chooses that branch."""
        def create_select(self, cond, lhs, rhs):
            out = operation(self, cond, lhs, rhs)
            chosen = np.broadcast_to(np.asarray(cond.data, dtype=bool), np.shape(out.data))
            products = carried(cond)
            if chosen.any():
                products = products | carried(lhs)
            if not chosen.all():
                products = products | carried(rhs)
            if products:
                carry(out, products)
            return out
        return create_select

    # Put in place for a counted call only (Tally), so that no other call pays for them.
    operations = [(builder, name, operation) for name, operation in list(vars(builder).items())
                  if name.startswith("create_") and name not in originals and (builder, name) not in wrappers
                  and callable(operation)]
    operations.append((interpreter.ReduceScanOpInterface, "apply", interpreter.ReduceScanOpInterface.apply))
    carrying_sets.update({"plain": operations,
                      "carrying": [(owner, name, carrying(operation)) for owner, name, operation in operations]})

    def interpreted_run(self, *args, grid, warmup, **kwargs):
        watched()
        if not warmup:
            gpu_compiler.check(self, args, kwargs)   # the body must be Triton that a GPU compiles
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    for name, wrapper in (("create_masked_load", create_masked_load), ("create_masked_store", create_masked_store),
                          ("create_dot", create_dot), ("create_fmul", create_fmul), ("set_grid_idx", set_grid_idx),
                          ("create_atomic_rmw", create_atomic_rmw), ("create_atomic_cas", create_atomic_cas),
                          ("create_fma", create_fma)):
        wrapper.__name__ = wrapper.__qualname__ = name
        setattr(builder, name, wrapper)
        wrappers[(builder, name)] = wrapper
    grid_executor_call.__name__ = grid_executor_call.__qualname__ = "__call__"
    interpreter.GridExecutor.__call__ = grid_executor_call
    wrappers[(interpreter.GridExecutor, "__call__")] = grid_executor_call
    interpreted_run.__name__ = interpreted_run.__qualname__ = "run"
    interpreter.InterpretedFunction.run = interpreted_run
    wrappers[(interpreter.InterpretedFunction, "run")] = interpreted_run
    device_call.__name__ = device_call.__qualname__ = "__call__"
    interpreter.InterpretedFunction.__call__ = device_call
    wrappers[(interpreter.InterpretedFunction, "__call__")] = device_call

    def switch_carrying(on):
        for owner, name, operation in carrying_sets.get("carrying" if on else "plain", ()):
            setattr(owner, name, operation)

    def begin():
        start = {name: state[name] for name in FIELDS}
        state["read"], state["stored"], state["products"], state["stored_products"] = [], [], {}, set()
        state["launched"] = set()
        state["counting"] = True
        switch_carrying(True)
        return start

    def end(start):
        """(counts, written, launched, stored) since begin() gave `start`: flops, the products whose
        results reached a store; flops_made, every product made; written, the addresses stored to;
        launched, the storages the kernels were launched on; stored, the last value a tl.store left at
        each address it wrote ({address: value}; an atomic's address maps to None)."""
        state["counting"] = False
        switch_carrying(False)
        counts = {name: state[name] - start[name] for name in FIELDS}
        counts["flops_made"] = counts["flops"]
        counts["flops"] = sum(state["products"][index] for index in state["stored_products"])
        state["products"], state["stored_products"] = {}, set()
        read, written = state["read"], [lanes for lanes, _ in state["stored"]]   # stores' and atomics' lanes
        counts["distinct"] = int(np.unique(np.concatenate(read)).size) if read else 0
        written = np.unique(np.concatenate(written)) if written else np.zeros(0, dtype=np.uint64)
        state["read"] = []
        launched, state["launched"] = state["launched"], set()
        stored = {}
        for lanes, values in state["stored"]:
            stored.update(zip(lanes.tolist(), values.tolist() if values is not None else [None] * lanes.size))
        state["stored"] = []
        return counts, written, launched, stored

    def intact():
        """Whether every wrapper is in place and none was ever seen replaced."""
        return in_place() and not state["replaced"]

    return begin, end, intact


# Set by prepare() where the interpreter runs the kernels; elsewhere nothing is installed to count with.
_begin = _end = _intact = _storages = None


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
            where = np.uint64(storage.data_ptr()) + index.numpy().astype(np.uint64).ravel() * np.uint64(tensor.element_size())
            kept = np.isin(where, self.written)
            size = tensor.element_size()
            bits = tensor.detach().reshape(-1).contiguous().view(torch.uint8).numpy().view(f"u{size}")
            for position in np.flatnonzero(kept):
                value = self.stored.get(int(where[position]))
                if value is not None and value < (1 << (8 * size)) and int(bits[position]) != value:
                    kept[position] = False   # written over after the kernel stored it
            stored += int(kept.sum())
            total += where.size
        self.output_stored = stored / total if total else None
