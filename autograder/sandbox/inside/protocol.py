"""The wire format between the trusted grader and a student process.

Both sides import this file, so it depends on nothing but the standard library, NumPy and torch.

A message is a length-prefixed payload (`pack`): JSON text, then the bytes of the tensors it names.
Nothing in it is code, and the reader (`unpack`, Python's json and torch.frombuffer) rebuilds only
plain containers, numbers, strings and plain tensors, so a hostile student process cannot make the
grader execute code, and a tensor subclass (with an ``__eq__`` that always says yes, say) cannot
cross at all.  A tensor stands in the text as ``{"tensor": [dtype, layout, shape, start, length]}``,
its elements in order at ``start`` of the bytes after the text; the reader refuses a kind it does not
take and a tensor over the size limit by these numbers alone, before it touches a byte.  (The format
was ``torch.save``'s with ``torch.load(weights_only=True)``: that unpickler, in Python, cost 1 to 10 ms
a message, a third of a check's seconds.)

Values are tagged (``["tensor", t]``, ``["ndarray", t]``, ...) so the grader can tell a NumPy array
from a tensor and a tuple from a list.  ``decode`` is where the grader meets bytes chosen by the
student, so it bounds everything that could cost the grader memory or time: the nesting depth, the
number of items (counted as they are visited, so shared references cannot multiply them), the
length of strings, the logical size of tensors (an expanded, zero-stride tensor is a few bytes on
the wire and gigabytes once touched) and their dtypes.
"""

import json
import math
import os
import select
import struct
import time

import numpy as np
import torch

HEADER = struct.Struct("!Q")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024   # on the wire
MAX_DEPTH = 24                         # nesting of containers
MAX_ITEMS = 200_000                    # values visited while decoding one message
MAX_STRING = 1_000_000                 # characters in one string (a cell of code, a traceback)
MAX_TENSOR_ELEMENTS = 1 << 22          # logical elements in one tensor (4 M)
MAX_TOTAL_ELEMENTS = 1 << 24           # logical elements in one message (16 M)


class ProtocolError(Exception):
    """The other side sent something that is not a valid message."""


class Unsupported(Exception):
    """A value that cannot cross the process boundary."""


class Timeout(Exception):
    """No complete message arrived before the deadline."""


TEXT = struct.Struct("!I")   # the length of a payload's JSON text
ALIGN = 16                   # where a tensor's bytes start in the payload's bytes: a multiple of this


def pack(message):
    """A message's payload: the length of its JSON text, the text, then the bytes of its tensors."""
    chunks, size = [], 0

    def tensor(value):   # what json cannot write itself: a tensor, named in the text, its bytes after it
        nonlocal size
        if not isinstance(value, torch.Tensor):
            raise Unsupported(f"a value of type {type(value).__name__} on the wire")
        data = _elements(value)
        start = -(-size // ALIGN) * ALIGN
        chunks.append(bytes(start - size) + data)
        size = start + len(data)
        return {"tensor": [str(value.dtype), str(value.layout), list(value.shape), start, len(data)]}

    text = json.dumps(message, default=tensor, separators=(",", ":")).encode()
    return TEXT.pack(len(text)) + text + b"".join(chunks)


def _elements(tensor):
    """A tensor's elements in order, as bytes (none for a kind the reader does not take: it says which)."""
    if tensor.layout != torch.strided or tensor.dtype not in _TENSOR_DTYPES or tensor.device.type == "meta":
        return b""
    plain = tensor.detach().resolve_conj().resolve_neg().cpu().contiguous()
    return plain.reshape(-1).view(torch.uint8).numpy().tobytes()


def unpack(payload):
    """The message of a payload (pack); ProtocolError for anything else, whoever wrote it."""
    try:
        (length,) = TEXT.unpack_from(payload)
        data = memoryview(bytearray(payload[TEXT.size + length:]))
        return json.loads(payload[TEXT.size: TEXT.size + length], object_hook=lambda item: _tensor(item, data))
    except ProtocolError:
        raise
    except BaseException as error:  # anything but plain data (a RecursionError too)
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        raise ProtocolError(f"an unreadable message ({type(error).__name__})") from None


def _tensor(item, data):
    """The tensor a JSON object names ({"tensor": [dtype, layout, shape, start, length]}), on the
    payload's bytes; any other object as it is (a dict's payload: its values are [tag, payload] pairs)."""
    named = item.get("tensor") if len(item) == 1 else None
    if type(named) is not list or len(named) != 5:
        return item
    dtype, layout, shape, start, length = named
    if layout != str(torch.strided) or _DTYPES.get(dtype) not in _TENSOR_DTYPES:
        raise ProtocolError(f"a tensor of an unsupported kind ({str(dtype)[:40]}, {str(layout)[:40]})")
    if type(shape) is not list or len(shape) > MAX_DEPTH or not all(type(n) is int and n >= 0 for n in shape):
        raise ProtocolError("a tensor with a malformed shape")
    elements = math.prod(shape)
    if elements > MAX_TENSOR_ELEMENTS:
        raise ProtocolError(f"a tensor of {elements} elements (shape {shape[:8]}), over the size limit")
    dtype = _DTYPES[dtype]
    if (type(start) is not int or type(length) is not int or start < 0 or length != elements * dtype.itemsize
            or start + length > len(data)):
        raise ProtocolError("a tensor whose bytes are not in the message")
    if not elements:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype, count=elements, offset=start).reshape(shape)


def write_message(fd, message):
    payload = pack(message)
    data = HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exactly(fd, size, deadline=None):
    chunks = []
    while size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise Timeout()
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("the other process closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_message(fd, deadline=None):
    """Read one message; with a deadline (time.monotonic()), raise Timeout when it passes."""
    (size,) = HEADER.unpack(read_exactly(fd, HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"a message of {size} bytes, over the {MAX_MESSAGE_BYTES >> 20} MB limit")
    return unpack(read_exactly(fd, size, deadline))


def _plain_tensor(value):
    # detach() and as_subclass() are plain torch calls; a subclass that overrides them still
    # cannot smuggle itself through, because the reader refuses anything but torch.Tensor.
    value = value.detach()
    if type(value) is not torch.Tensor:
        value = torch.Tensor.as_subclass(value, torch.Tensor)
    return value.clone()


class Strided:
    """A tensor the grader sends with its layout in memory (sizes, strides and what lies between its
    elements), for code that must read memory by its strides (a kernel): the other side rebuilds
    the same view on a copy of the span of memory it covers.  Without it every tensor arrives
    contiguous."""

    def __init__(self, tensor):
        self.tensor = tensor


def _last_offset(shape, strides):
    """How far a layout's last element lies from its first, in elements (-1 when it holds none)."""
    return sum((size - 1) * stride for size, stride in zip(shape, strides)) if all(shape) else -1


def _span(tensor):
    """The elements of memory from the tensor's first element to its last, as a 1-D copy."""
    return torch.as_strided(tensor, (_last_offset(tensor.shape, tensor.stride()) + 1,), (1,)).clone()


def clean_text(text):
    """The text with lone surrogates (which cannot be written as UTF-8) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")


def encode(value):
    """Turn a value into tagged plain data; raise Unsupported for anything else."""
    if isinstance(value, torch.Tensor):
        return ["tensor", _plain_tensor(value)]
    if isinstance(value, Strided):
        tensor = value.tensor.detach()
        if type(tensor) is not torch.Tensor or any(stride < 0 for stride in tensor.stride()):
            raise Unsupported("a strided tensor that is not a plain tensor with positive strides")
        return ["strided", [_span(tensor), encode(tuple(tensor.shape)), encode(tuple(tensor.stride()))]]
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise Unsupported("a NumPy array of Python objects")
        return ["ndarray", torch.from_numpy(np.ascontiguousarray(value).copy())]
    if isinstance(value, np.generic):
        return ["py", value.item()]
    if isinstance(value, str):
        return ["py", clean_text(value)]
    if value is None or isinstance(value, (bool, int, float)):
        return ["py", value]
    if isinstance(value, torch.dtype):
        return ["dtype", str(value)]
    if isinstance(value, torch.Size):
        return ["tuple", [["py", int(size)] for size in value]]
    if isinstance(value, (tuple, list)):
        return ["tuple" if isinstance(value, tuple) else "list", [encode(item) for item in value]]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise Unsupported("a dict whose keys are not all strings")
        return ["dict", {clean_text(key): encode(item) for key, item in value.items()}]
    raise Unsupported(f"a value of type {type(value).__name__}")


_DTYPES = {str(dtype): dtype for dtype in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}
_TENSOR_DTYPES = set(_DTYPES.values())
_DTYPES.update({str(dtype): dtype for dtype in (torch.float8_e4m3fn, torch.float8_e5m2)})  # as arguments only


class _Budget:
    def __init__(self):
        self.items = 0
        self.elements = 0

    def visit(self):
        self.items += 1
        if self.items > MAX_ITEMS:
            raise ProtocolError(f"a message with more than {MAX_ITEMS} values")


def _checked_tensor(tensor, budget):
    if tensor.layout != torch.strided or tensor.device.type != "cpu" or tensor.dtype not in _TENSOR_DTYPES:
        raise ProtocolError(f"a tensor of an unsupported kind ({tensor.dtype}, {tensor.layout})")
    if tensor.is_neg() or tensor.is_conj():
        raise ProtocolError("a tensor with a lazy negation or conjugation")
    elements = tensor.numel()
    budget.elements += elements
    if elements > MAX_TENSOR_ELEMENTS or budget.elements > MAX_TOTAL_ELEMENTS:
        raise ProtocolError(f"a tensor of {elements} elements (shape {list(tensor.shape)[:8]}), "
                            "over the size limit")
    # From here on the grader owns a compact copy: no shared, expanded or overlapping storage.
    return tensor.contiguous().clone()


def _strided(payload, budget, depth):
    """The view a Strided tensor was sent as, on its span of memory; its bounds checked first."""
    if type(payload) is not list or len(payload) != 3 or type(payload[0]) is not torch.Tensor:
        raise ProtocolError("a malformed strided tensor")
    span = _checked_tensor(payload[0], budget)
    shape, strides = decode(payload[1], depth + 1, budget), decode(payload[2], depth + 1, budget)
    if (type(shape) is not tuple or type(strides) is not tuple or len(shape) != len(strides) or len(shape) > 8
            or not all(type(n) is int and n >= 0 for n in shape + strides) or span.dim() != 1):
        raise ProtocolError("a strided tensor with a malformed layout")
    if _last_offset(shape, strides) >= span.numel() or int(np.prod(shape, dtype=np.int64)) > MAX_TENSOR_ELEMENTS:
        raise ProtocolError("a strided tensor whose layout reaches past its memory")
    return torch.as_strided(span, shape, strides)


def decode(tagged, _depth=0, _budget=None, strided=False):
    """Inverse of encode; raise ProtocolError on anything malformed or over the limits.  strided:
    accept Strided tensors (only the student's side does: what it receives comes from the grader)."""
    budget = _budget or _Budget()
    budget.visit()
    if _depth > MAX_DEPTH:
        raise ProtocolError(f"a value nested more than {MAX_DEPTH} levels deep")
    if type(tagged) not in (list, tuple) or len(tagged) != 2 or type(tagged[0]) is not str:
        raise ProtocolError("a malformed value")
    tag, payload = tagged
    if tag == "tensor" and type(payload) is torch.Tensor:
        return _checked_tensor(payload, budget)
    if tag == "strided" and strided:
        return _strided(payload, budget, _depth)
    if tag == "ndarray" and type(payload) is torch.Tensor:
        return _checked_tensor(payload, budget).numpy()
    if tag == "py" and type(payload) is str:
        if len(payload) > MAX_STRING:
            raise ProtocolError(f"a string of more than {MAX_STRING} characters")
        return clean_text(payload)
    if tag == "py" and (payload is None or type(payload) in (bool, float)):
        return payload
    if tag == "py" and type(payload) is int:
        if abs(payload) >= 1 << 64:
            raise ProtocolError("an integer too large to be a size or a count")
        return payload
    if tag == "dtype" and type(payload) is str and payload in _DTYPES:
        return _DTYPES[payload]
    if tag in ("tuple", "list") and type(payload) is list:
        items = [decode(item, _depth + 1, budget, strided) for item in payload]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and type(payload) is dict:
        decoded = {}
        for key, item in payload.items():
            if type(key) is not str or len(key) > 1000:
                raise ProtocolError("a dict with a key that is not a short string")
            decoded[clean_text(key)] = decode(item, _depth + 1, budget, strided)
        return decoded
    raise ProtocolError(f"a malformed value with tag {str(tag)[:20]!r}")
