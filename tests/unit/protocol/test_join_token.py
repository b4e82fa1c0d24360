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
        # join connected to these: tcp:// raised EINVAL, a port of 99999 waited for no answer (exit 3)
        _token(json.dumps({"n": "a", "e": ["tcp://"], "p": [], "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["tcp://h:99999"], "p": [], "k": "k" * 40, "s": "s" * 40}).encode()),
        _token(json.dumps({"n": "a", "e": ["tcp://h:1"], "p": ["tcp://h:0"], "k": "k" * 40, "s": "s" * 40}).encode()),
    ],
    ids=["no-prefix", "not-base64", "not-utf8", "nested", "a-list", "endpoints-not-a-list", "no-endpoint", "short-key",
         "endpoints-a-string", "endpoint-not-tcp", "pub-a-string", "key-not-z85", "secret-past-32-bits",
         "endpoint-no-address", "endpoint-port-past-65535", "pub-port-0"],
)
def test_anything_else_is_one_line_saying_what_to_do(token):
    with pytest.raises(UsageError) as raised:
        read_token(token)
    assert "\n" not in raised.value.message and ("lockstep invite" in raised.value.message)


def test_a_joined_clones_remote_file_reads_back_or_says_it_is_damaged(tmp_path):
    import zmq

    from protocol.curve import REMOTE_FILE, read_remote

    assert read_remote(tmp_path) is None  # never joined
    public, secret = (key.decode() for key in zmq.curve_keypair())
    good = {"agent": "bob", "endpoints": ["tcp://10.0.0.1:7000"], "pub": ["tcp://10.0.0.1:7001"],
            "server_key": public, "public": public, "secret": secret}
    (tmp_path / REMOTE_FILE).write_text(json.dumps(good))
    assert read_remote(tmp_path) == good
    damaged = [
        "not json", "[1]", json.dumps({**good, "endpoints": []}), json.dumps({**good, "endpoints": "tcp://10.0.0.1:7000"}),
        json.dumps({**good, "endpoints": [5]}), json.dumps({k: v for k, v in good.items() if k != "server_key"}),
        json.dumps({**good, "secret": 5}), json.dumps({**good, "public": "x" * 39}), json.dumps({**good, "pub": "tcp://x:1"}),
        json.dumps({**good, "agent": ["bob"]}),
    ]
    for text in damaged:
        (tmp_path / REMOTE_FILE).write_text(text)
        with pytest.raises(UsageError, match=r"remote.json is damaged \(.*\): join again with `lockstep join TOKEN`"):
            read_remote(tmp_path)
    (tmp_path / REMOTE_FILE).unlink()
    (tmp_path / REMOTE_FILE).mkdir()  # not even a file
    with pytest.raises(UsageError, match="is damaged"):
        read_remote(tmp_path)
