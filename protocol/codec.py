"""Encoding and decoding, with errors by who is at fault.

One encoder and one decoder per direction are built once and reused (msgspec decoders
are cheap to call and costly to build: ~4 ms each for requests and replies).  The
decoders are built on first use: a one-shot client never decodes a request, and it
starts on every hook call.  ``decode_request`` turns every way a peer can
get a frame wrong into a ``PeerError`` with a code the client can act on.

Hostile frames: msgspec decodes nested containers recursively, and a ~100 KB frame of
nested arrays (inside an ``Any`` field such as ``probe.params``, or under a field the
decoder skips) raises ``RecursionError``, which no caller expects.  So every inbound
frame's *shape* is bounded before it is decoded: at most ``MAX_DEPTH`` nested
containers and ``MAX_ELEMENTS`` elements in all.  ``check_shape`` walks the msgpack
bytes with an explicit stack (no recursion).  Most frames never need the walk: a frame
with few bytes that could be container headers cannot nest deeply, and a short frame
cannot hold many elements; counting those bytes is one C call (``bytes.translate``).
"""

from __future__ import annotations

import msgspec

from .errors import PeerError
from .messages import (
    MAX_MESSAGE_BYTES,
    ClientMessage,
    Publication,
    ServerMessage,
)

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[str, msgspec.msgpack.Decoder] = {}
_DECODED = {"request": ClientMessage, "reply": ServerMessage, "publication": Publication, "sniff": dict[str, object]}

encode = _encoder.encode


def _decoder(kind: str) -> msgspec.msgpack.Decoder:
    """The decoder of ``kind`` (a key of ``_DECODED``), built the first time it is needed."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(_DECODED[kind])
    return decoder

MAX_DEPTH = 64  # nested containers in one message (real requests use fewer than 10)
MAX_ELEMENTS = 100_000  # array items plus map keys and values, in all

# Bytes that may start a container: fixmap, fixarray, array16/32, map16/32.
_CONTAINER_BYTES = bytes(range(0x80, 0xA0)) + b"\xdc\xdd\xde\xdf"
_NOT_CONTAINER = bytes(b for b in range(256) if b not in _CONTAINER_BYTES)
# Scalars: byte -> how many more bytes follow it (fixed size), or a (length bytes,
# extra bytes) pair for str/bin/ext whose size is given in the next bytes.
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
          0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
_SIZED = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1),
          0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)}
_LONG_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}  # (size bytes, items per entry)


def check_shape(frame: bytes, max_depth: int = MAX_DEPTH, max_elements: int = MAX_ELEMENTS) -> None:
    """Raise ``PeerError("malformed")`` if ``frame`` nests deeper than ``max_depth`` or
    holds more than ``max_elements`` elements.  Iterative: safe on any input."""
    if len(frame.translate(None, _NOT_CONTAINER)) <= max_depth and len(frame) <= max_elements:
        return  # too few container headers to nest deeply, too short for many elements
    end = len(frame)
    pos = 0
    elements = 0
    pending = [1]  # items still expected in each open container; the message itself is one
    while pending:
        if pending[-1] == 0:
            pending.pop()
            continue
        pending[-1] -= 1
        if pos >= end:
            return  # truncated: the decoder says so
        b = frame[pos]
        pos += 1
        if b < 0x80 or b >= 0xE0 or 0xA0 <= b <= 0xBF:
            pos += (b & 0x1F) if 0xA0 <= b <= 0xBF else 0  # fixint, or fixstr's bytes
            continue
        if b <= 0x9F:  # fixmap / fixarray
            items = (b & 0x0F) * (2 if b <= 0x8F else 1)
        elif b in _LONG_CONTAINERS:
            size, per = _LONG_CONTAINERS[b]
            items = int.from_bytes(frame[pos : pos + size], "big") * per
            pos += size
        elif b in _FIXED:
            pos += _FIXED[b]
            continue
        elif b in _SIZED:
            size, extra = _SIZED[b]
            pos += size + extra + int.from_bytes(frame[pos : pos + size], "big")
            continue
        else:
            return  # 0xc1 is never valid: the decoder says so
        elements += items
        if elements > max_elements:
            raise PeerError("malformed", f"message holds more than {max_elements} elements")
        if len(pending) > max_depth:  # this container is the len(pending)-th level
            raise PeerError("malformed", f"message nests containers deeper than {max_depth} levels")
        if items:
            pending.append(items)


def decode_request(frame: bytes):
    """Decode a client's frame, or raise ``PeerError`` saying what is wrong with it."""
    if len(frame) > MAX_MESSAGE_BYTES:
        raise PeerError("too_large", f"message of {len(frame)} bytes exceeds the cap of {MAX_MESSAGE_BYTES}")
    check_shape(frame)
    try:
        return _decoder("request").decode(frame)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if "Invalid value" in text and "`$.type`" in text:
            raise PeerError("unknown_type", f"unknown message type: {text}") from None
        raise PeerError("malformed", f"invalid message: {text}") from None
    except msgspec.DecodeError as exc:
        raise PeerError("malformed", f"undecodable frame: {exc}") from None
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:  # bounded above; never let one out
        raise PeerError("malformed", f"undecodable frame: {type(exc).__name__}: {exc}") from None


def sniff_req(frame: bytes) -> int:
    """Best effort: the ``req`` of a frame we refuse, so the client can match the error."""
    try:
        check_shape(frame)
        req = _decoder("sniff").decode(frame).get("req", 0)
    except Exception:  # whatever is wrong with the frame was already reported
        return 0
    return req if type(req) is int else 0  # not a bool


def decode_reply(frame: bytes):
    return _decoder("reply").decode(frame)


def decode_publication(frame: bytes) -> Publication:
    return _decoder("publication").decode(frame)
