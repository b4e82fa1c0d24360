"""protocol.curve's join tokens: what `invite` prints, `join` reads back; anything else
is a one-line UsageError (the token comes from a chat message or a clipboard)."""

from __future__ import annotations

import base64
import json

import pytest

from protocol.curve import TOKEN_PREFIX, make_token, read_token
from protocol.errors import UsageError

KEY, SECRET = b"k" * 40, b"s" * 40


def _token(body: bytes) -> str:
    return TOKEN_PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=")


def test_a_token_reads_back_what_invite_put_in_it():
    token = make_token("alice", ["tcp://10.0.0.1:7000"], ["tcp://10.0.0.1:7001"], KEY, SECRET)
    assert read_token(f"  {token}\n") == {
        "name": "alice", "endpoints": ["tcp://10.0.0.1:7000"], "pub": ["tcp://10.0.0.1:7001"], "server_key": KEY, "secret": SECRET,
    }


@pytest.mark.parametrize(
    "token",
    [
        "garbage",
        TOKEN_PREFIX + "!!!not base64!!!",
        _token(b"\xff\xfe"),
        _token(b"[" * 20_000 + b"]" * 20_000),  # nested without end: once a RecursionError traceback
        _token(b"[1, 2]"),
        _token(json.dumps({"n": "a", "e": 5, "p": [], "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": [], "p": [], "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["tcp://h:1"], "p": [], "k": "short", "s": "s" * 40}).encode()),
        # each of these passed, then zmq raised a bare EINVAL in a traceback at join
        _token(json.dumps({"n": "a", "e": "tcp://h:1", "p": [], "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["foo://h:1"], "p": [], "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["tcp://h:1"], "p": "tcp://h:2", "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["tcp://h:1"], "p": [], "k": "~" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["tcp://h:1"], "p": [], "k": "k" * 40, "s": "#" * 40}).encode()),
    ],
    ids=["no-prefix", "not-base64", "not-utf8", "nested", "a-list", "endpoints-not-a-list", "no-endpoint", "short-key",
         "endpoints-a-string", "endpoint-not-tcp", "pub-a-string", "key-not-z85", "secret-past-32-bits"],
)
def test_anything_else_is_one_line_saying_what_to_do(token):
    with pytest.raises(UsageError) as raised:
        read_token(token)
    assert "\n" not in raised.value.message and ("lockstep invite" in raised.value.message)
