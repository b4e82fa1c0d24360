"""Encoding and decoding, with errors by who is at fault.

One encoder and one decoder per direction are built once and reused (msgspec decoders
are cheap to call and costly to build).  ``decode_request`` turns every way a peer can
get a frame wrong into a ``PeerError`` with a code the client can act on.
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
_request_decoder = msgspec.msgpack.Decoder(ClientMessage)
_reply_decoder = msgspec.msgpack.Decoder(ServerMessage)
_publication_decoder = msgspec.msgpack.Decoder(Publication)

encode = _encoder.encode


def decode_request(frame: bytes):
    """Decode a client's frame, or raise ``PeerError`` saying what is wrong with it."""
    if len(frame) > MAX_MESSAGE_BYTES:
        raise PeerError("too_large", f"message of {len(frame)} bytes exceeds the cap of {MAX_MESSAGE_BYTES}")
    try:
        return _request_decoder.decode(frame)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if "Invalid value" in text and "`$.type`" in text:
            raise PeerError("unknown_type", f"unknown message type: {text}") from None
        raise PeerError("malformed", f"invalid message: {text}") from None
    except msgspec.DecodeError as exc:
        raise PeerError("malformed", f"undecodable frame: {exc}") from None


def decode_reply(frame: bytes):
    return _reply_decoder.decode(frame)


def decode_publication(frame: bytes) -> Publication:
    return _publication_decoder.decode(frame)
