"""The wire format between the trusted grader and a student process.

Both sides import this file, so it depends on nothing but the standard library, NumPy and torch.

A message is a length-prefixed blob written by ``torch.save``.  The reader always uses
``torch.load(weights_only=True)``: that unpickler only rebuilds plain containers, numbers, strings
and plain tensors, so a hostile student process cannot make the grader execute code, and a tensor
subclass (with an ``__eq__`` that always says yes, say) is refused instead of compared.

Values are tagged (``["tensor", t]``, ``["ndarray", t]``, ...) so the grader can tell a NumPy array
from a tensor and a tuple from a list.
"""

import io
import os
import select
import struct
import time

import numpy as np
import torch

HEADER = struct.Struct("!Q")
MAX_MESSAGE_BYTES = 512 * 1024 * 1024


class ProtocolError(Exception):
    """The other side sent something that is not a valid message."""


class Unsupported(Exception):
    """A value that cannot cross the process boundary."""


def write_message(fd, message):
    buffer = io.BytesIO()
    torch.save(message, buffer)
    payload = buffer.getvalue()
    data = HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class Timeout(Exception):
    """No complete message arrived before the deadline."""


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
        raise ProtocolError(f"message of {size} bytes is larger than the limit")
    payload = read_exactly(fd, size, deadline)
    try:
        return torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    except Exception as error:  # the unpickler refuses anything but plain data
        raise ProtocolError(f"unreadable message ({type(error).__name__})") from None


def _plain_tensor(value):
    # detach() and as_subclass() are plain torch calls; a subclass that overrides them still
    # cannot smuggle itself through, because the reader refuses anything but torch.Tensor.
    value = value.detach()
    if type(value) is not torch.Tensor:
        value = torch.Tensor.as_subclass(value, torch.Tensor)
    return value.clone()


def encode(value):
    """Turn a value into tagged plain data; raise Unsupported for anything else."""
    if isinstance(value, torch.Tensor):
        return ["tensor", _plain_tensor(value)]
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise Unsupported("a NumPy array of Python objects")
        return ["ndarray", torch.from_numpy(np.ascontiguousarray(value).copy())]
    if isinstance(value, np.generic):
        return ["py", value.item()]
    if value is None or isinstance(value, (bool, int, float, str)):
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
        return ["dict", {key: encode(item) for key, item in value.items()}]
    raise Unsupported(f"a value of type {type(value).__name__}")


_DTYPES = {str(dtype): dtype for dtype in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


def decode(tagged):
    """Inverse of encode; raise ProtocolError on anything malformed."""
    try:
        tag, payload = tagged
    except (TypeError, ValueError):
        raise ProtocolError("malformed value") from None
    if tag == "tensor" and type(payload) is torch.Tensor:
        return payload
    if tag == "ndarray" and type(payload) is torch.Tensor:
        return payload.numpy()
    if tag == "py" and (payload is None or type(payload) in (bool, int, float, str)):
        return payload
    if tag == "dtype" and payload in _DTYPES:
        return _DTYPES[payload]
    if tag in ("tuple", "list") and isinstance(payload, list):
        items = [decode(item) for item in payload]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict" and isinstance(payload, dict):
        return {str(key): decode(item) for key, item in payload.items()}
    raise ProtocolError(f"malformed value with tag {tag!r}")
