"""The shape bound on inbound frames: depth and element count, without recursion."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.codec import MAX_DEPTH, check_shape, decode_request, sniff_req
from protocol.errors import PeerError

_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=40) | st.binary(max_size=40),
    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=6), kids, max_size=6),
    max_leaves=60,
)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _elements(value) -> int:
    if isinstance(value, list):
        return len(value) + sum(_elements(v) for v in value)
    if isinstance(value, dict):
        return 2 * len(value) + sum(_elements(v) for v in value.values())
    return 0


@given(_values, st.integers(0, 8), st.integers(0, 200))
def test_the_bound_holds_exactly_what_the_decoder_would_build(value, max_depth, max_elements):
    frame = msgspec.msgpack.encode(value)
    if _depth(value) <= max_depth and _elements(value) <= max_elements:
        check_shape(frame, max_depth, max_elements)
    else:
        with pytest.raises(PeerError):
            check_shape(frame, max_depth, max_elements)


@given(st.binary(max_size=2000))
def test_any_bytes_give_a_message_or_a_peer_error(frame):
    try:
        decode_request(frame)
    except PeerError:
        pass
    assert isinstance(sniff_req(frame), int)


@pytest.mark.parametrize("prefix,suffix", [(b"\x91", b"\x01"), (b"\x81\xa1k", b"\x01")])
def test_deep_nesting_is_malformed_not_a_recursion_error(prefix, suffix):
    frame = b"\x82\xa4type\xa6status\xa3req" + prefix * (100_000 // len(prefix)) + suffix
    with pytest.raises(PeerError) as caught:
        decode_request(frame)
    assert caught.value.code == "malformed"
    assert f"deeper than {MAX_DEPTH}" in caught.value.message
    assert sniff_req(frame) == 0


def test_an_element_bomb_is_malformed():
    with pytest.raises(PeerError, match="elements"):
        decode_request(b"\xdd" + (200_000).to_bytes(4, "big") + b"\xc0" * 200_000)


def test_sniffed_req_is_an_int_never_a_bool():
    assert sniff_req(msgspec.msgpack.encode({"type": "x", "req": True})) == 0
    assert sniff_req(msgspec.msgpack.encode({"type": "x", "req": 12})) == 12
