"""Hostile frames against a real coordinator: nothing a peer sends can end it.

Each test reproduces a failure seen when the coordinator was attacked black-box (a
frame that killed it, a path that printed a traceback) and checks what must hold now:
the peer gets an error, the coordinator keeps granting, its ledger is intact, and the
registry it holds is the one a replay of its ledger gives.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import messages as m
from protocol.codec import decode_reply, decode_request, encode
from protocol.errors import PeerError

from .conftest import cli, env_for, make_repo, status
from .test_bad_input import RawClient

# Leases long enough that an agent never goes stale while its coordinator restarts.
STEADY = ("--heartbeat", "0.5", "--liveness", "20", "--lock-delay", "1")
DEEP = 100_000  # ~100 KB of nested arrays: enough to raise RecursionError in msgspec


def _str(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) < 32
    return bytes([0xA0 | len(raw)]) + raw


def _map(*pairs: tuple[str, bytes]) -> bytes:
    assert len(pairs) < 16
    return bytes([0x80 | len(pairs)]) + b"".join(_str(k) + v for k, v in pairs)


def nested_arrays(depth: int) -> bytes:
    return b"\x91" * depth + b"\x01"


def nested_maps(depth: int) -> bytes:
    return b"\x81\xa1k" * depth + b"\x01"


def deep_frames(depth: int = DEEP, nest=nested_arrays) -> list[bytes]:
    """The frames that killed the coordinator, and their relatives."""
    deep = nest(depth)
    return [
        _map(("type", _str("status")), ("req", deep)),  # inside a map value
        _map(("type", _str("status")), ("req", _str("1")), ("x", deep)),  # under a field the decoder skips
        _map(("x", deep), ("type", _str("status"))),  # before the tag
        _map(("type", _str("check")), ("req", b"\x07"), ("probe", _map(("kind", _str("cmd")), ("params", _map(("x", deep)))))),
        deep,  # the whole frame
    ]


def assert_still_serving(repo, raw: RawClient, alice, token: int) -> None:
    """The coordinator answers, grants, and fences as before."""
    assert alice.do("intent", paths=["src/app.py"], token=token)["verdict"] == "allow"
    assert alice.do("claim", paths=["src/new.py"])["type"] == "granted"
    alice.do("release", paths=["src/new.py"])
    raw.send(encode(m.Status(req=99)))
    assert isinstance(raw.reply(), m.StatusReply)


def assert_ledger_intact_and_replayed(repo, c) -> None:
    """``PRAGMA integrity_check`` passes, and a coordinator restarted from the ledger
    alone (killed: no snapshot at stop) holds exactly the claims this one held."""
    before = sorted((x["pattern"], x["holder"], x["token"], x["access"]) for x in status(repo)["claims"])
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    c.kill()
    c.start()
    after = sorted((x["pattern"], x["holder"], x["token"], x["access"]) for x in status(repo)["claims"])
    assert after == before


def send_and_expect_error(raw: RawClient, frame: bytes, req: int = 0) -> m.Error:
    raw.send(frame)
    reply = raw.reply()
    assert isinstance(reply, m.Error), reply
    return reply


def test_a_deeply_nested_frame_gets_malformed_and_the_coordinator_keeps_serving(repo, coordinator, agents):
    c = coordinator(*STEADY)
    alice = agents("alice", repo.root)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        for nest in (nested_arrays, nested_maps):
            for frame in deep_frames(DEEP if nest is nested_arrays else DEEP // 3, nest):
                assert len(frame) < m.MAX_MESSAGE_BYTES
                assert send_and_expect_error(raw, frame).code == "malformed"
                assert c.proc.poll() is None
        # an element bomb: an array that says it holds 200,000 nils
        bomb = b"\xdd" + (200_000).to_bytes(4, "big") + b"\xc0" * 200_000
        assert send_and_expect_error(raw, bomb).code == "malformed"
        # moderately nested check params (a real probe's shape) still decode
        params = {"x": [[[[{"a": [1, 2, {"b": None}]}]]]]}
        raw.send(encode(m.Check(req=8, probe=m.ProbeRequest(kind="no-such-kind", params=params))))
        assert raw.reply().req == 8
        assert_still_serving(repo, raw, alice, token)
    finally:
        raw.close()
    assert_ledger_intact_and_replayed(repo, c)


# ------------------------------------------------------------------ fuzz

_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20) | st.binary(max_size=20)
_values = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=8), kids, max_size=5), max_leaves=40)
_tags = st.sampled_from(["hello", "hb", "watch", "claim", "release", "intent", "status", "bye", "check", "verify", "done", "job", "plan_run", "nope"])
_fields = st.sampled_from(["req", "session", "paths", "agent", "probe", "params", "token", "kind", "v", "all", "force", "x"])


@st.composite
def _mutated_message(draw) -> bytes:
    """A message-shaped map: a known tag, then fields with any values."""
    body = {"type": draw(_tags)}
    for field in draw(st.lists(_fields, max_size=5)):
        body[field] = draw(_values)
    return msgspec.msgpack.encode(body)


@st.composite
def _deep_frame(draw) -> bytes:
    depth = draw(st.integers(1, 120_000))
    nest = draw(st.sampled_from([nested_arrays, nested_maps]))
    frames = deep_frames(depth if nest is nested_arrays else max(1, depth // 3), nest)
    return draw(st.sampled_from(frames))


_frames = (
    st.binary(max_size=300)
    | _values.map(msgspec.msgpack.encode)
    | _mutated_message()
    | _deep_frame()
    | st.builds(lambda head, n, body: head + n.to_bytes(4, "big") + body, st.sampled_from([b"\xdd", b"\xdf", b"\xc6", b"\xdb", b"\xc9"]), st.integers(0, 2**32 - 1), st.binary(max_size=64))
)


def _harmless(protected: set[str]):
    """Frames the fuzzer must not send: a valid ``shutdown`` stops the coordinator, and
    a valid request in a test agent's session acts for it (both on purpose: features,
    not crashes)."""

    def check(frame: bytes) -> bool:
        try:
            message = decode_request(frame)
        except PeerError:
            return True
        return not isinstance(message, m.Shutdown) and getattr(message, "session", None) not in protected

    return check


def test_thousands_of_fuzzed_frames_leave_the_coordinator_granting_and_its_ledger_whole(repo, coordinator, agents):
    c = coordinator(*STEADY)
    alice = agents("alice", repo.root)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    raw = RawClient(status(repo)["endpoints"][0])
    sent = [0]

    # Frames come 25 to an example (Hypothesis' cost per example is several times its
    # cost per frame), followed by a status round trip (per frame it would cost the registry).
    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(frames=st.lists(_frames.filter(_harmless({alice.session})), min_size=25, max_size=25))
    def send_some(frames: list[bytes]) -> None:
        for frame in frames:
            raw.send(frame)
        sent[0] += len(frames)
        handled()

    def handled() -> None:
        raw.send(encode(m.Status(req=424242)))  # every frame before it was handled
        while True:
            reply = raw.reply()
            if isinstance(reply, m.StatusReply) and reply.req == 424242:
                break

    try:
        send_some()
        assert sent[0] >= 2000
        assert c.proc.poll() is None
        assert_still_serving(repo, raw, alice, token)
    finally:
        raw.close()
    assert_ledger_intact_and_replayed(repo, c)


# ------------------------------------------------------------------ sockets nobody else can reach


def _free_port(family=None) -> int:
    import socket

    with socket.socket(family or socket.AF_INET) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def short_runtime(monkeypatch):
    """A private, short XDG_RUNTIME_DIR for this test (sockets of deep repositories go there)."""
    path = Path(tempfile.mkdtemp(prefix="ls-rt-"))
    path.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _deep_repo(tmp_path):
    repo = make_repo(tmp_path.joinpath(*["a-rather-long-directory-name"] * 5, "repo"))
    assert len(str(repo.state_dir / "pub.sock")) > 107
    return repo


def test_a_deep_repository_binds_in_a_private_runtime_dir_never_an_abstract_socket(tmp_path, short_runtime, coordinator_in):
    repo = _deep_repo(tmp_path)
    coordinator_in(repo, *STEADY)
    endpoints = status(repo)["endpoints"] + status(repo)["pub"]
    assert not any(e.startswith("ipc://@") for e in endpoints), endpoints
    for endpoint in endpoints:
        sock = Path(endpoint[len("ipc://") :])
        assert sock.parent == short_runtime / "lockstep"
        assert stat.S_ISSOCK(sock.stat().st_mode) and sock.stat().st_mode & 0o777 == 0o600
    private = short_runtime / "lockstep"
    assert private.stat().st_mode & 0o777 == 0o700 and private.stat().st_uid == os.getuid()
    assert (repo.state_dir / "coordinator.log").stat().st_mode & 0o777 == 0o600
    # found from the other worktree without flags
    assert cli("claim", "x.py", "--agent", "deep", cwd=repo.other).rc == 0


def test_a_runtime_dir_that_is_a_symlink_is_refused(tmp_path, short_runtime):
    repo = _deep_repo(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (short_runtime / "lockstep").symlink_to(elsewhere)
    result = cli("serve", *STEADY, cwd=repo.root, timeout=30)
    assert result.rc == 2
    assert "not a plain directory" in result.err and "Traceback" not in result.err
    assert list(elsewhere.iterdir()) == []


def test_abstract_socket_endpoints_are_refused(repo):
    result = cli("serve", "--endpoint", "ipc://@lockstep-evil", cwd=repo.root, timeout=30)
    assert result.rc == 2 and "abstract unix socket" in result.err and "Traceback" not in result.err
    result = cli("status", "--endpoint", "ipc://@lockstep-evil", cwd=repo.root)
    assert result.rc == 2 and "abstract unix socket" in result.err


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_another_local_user_cannot_reach_the_coordinator(tmp_path, short_runtime, coordinator_in):
    repo = _deep_repo(tmp_path)
    coordinator_in(repo, *STEADY)
    endpoint = status(repo)["endpoints"][0]
    probe = (
        "import os, sys, zmq\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "s = zmq.Context().socket(zmq.DEALER); s.setsockopt(zmq.LINGER, 0)\n"
        "s.connect(sys.argv[1]); s.send(sys.argv[2].encode('latin-1'))\n"
        "print('answered' if s.poll(2000) else 'no answer')\n"
    )
    frame = encode(m.Status(req=1)).decode("latin-1")
    out = subprocess.run([sys.executable, "-c", probe, endpoint, frame], capture_output=True, text=True, timeout=30, env=env_for())
    assert out.stdout.strip() == "no answer", out


def test_serve_on_ipv6_loopback_works(repo, coordinator):
    import socket

    port = _free_port(socket.AF_INET6)
    coordinator(*STEADY, "--endpoint", f"tcp://[::1]:{port}", "--pub-endpoint", f"tcp://[::1]:{_free_port(socket.AF_INET6)}")
    assert status(repo)["endpoints"] == [f"tcp://[::1]:{port}"]
    assert cli("claim", "src/app.py", "--agent", "six", cwd=repo.other).rc == 0


def test_an_endpoint_that_cannot_be_bound_says_so_and_exits_2(repo):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("serve", "--endpoint", f"tcp://127.0.0.1:{port}", cwd=repo.root, timeout=30)
    assert result.rc == 2 and f"cannot listen on tcp://127.0.0.1:{port}" in result.err
    assert "Traceback" not in result.err


def test_an_ipc_endpoint_that_is_a_directory_says_so_and_exits_2(repo, tmp_path):
    # unlinking a stale socket file there raised before the socket was closed: serve hung in ctx.term()
    result = cli("serve", "--endpoint", f"ipc://{tmp_path}", cwd=repo.root, timeout=20)
    assert result.rc == 2 and f"cannot listen on ipc://{tmp_path}" in result.err, result
    assert "Traceback" not in result.err


# ------------------------------------------------------------------ paths the OS refuses


def test_an_over_long_path_segment_is_bad_input_in_one_line(repo, coordinator):
    coordinator(*STEADY)
    for verb in ("claim", "intent", "release"):
        result = cli(verb, "a" * 300 + "/x.py", "--agent", "alice", cwd=repo.root)
        assert result.rc == 2, (verb, result)
        assert "File name too long" in result.err and "Traceback" not in result.err
        assert len(result.err.strip().splitlines()) == 1
    result = cli("claim", "a" * 300, "--agent", "alice", "--json", cwd=repo.root)
    assert result.rc == 2 and result.json["error"]["code"] == "bad_path"


# ------------------------------------------------------------------ idempotent requests


def _granted_events(repo) -> list[dict]:
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("select agent, token, data from events where kind = 'claim.granted' order by id").fetchall()
    finally:
        conn.close()
    return [{"agent": a, "token": t, **msgspec.json.decode(d)} for a, t, d in rows]


def test_a_retried_request_gets_its_first_answer_not_a_second_grant(repo, coordinator):
    coordinator(*STEADY)
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        raw.send(encode(m.Hello(agent="retrier", req=1)))
        session = raw.reply().session
        claim = encode(m.Claim(session=session, paths=["src/a.py", "src/b/"], req=2))
        raw.send(claim)
        first = raw.reply()
        raw.send(claim)  # the client timed out and sends the very same request again
        again = raw.reply()
        assert isinstance(first, m.Granted) and again == first
        intent = encode(m.Intent(session=session, paths=["src/c.py"], req=3))  # auto-claims
        raw.send(intent)
        decided = raw.reply()
        raw.send(intent)
        assert raw.reply() == decided and decided.verdict == "allow" and decided.token is not None
        # the same req with other content is a new request
        raw.send(encode(m.Claim(session=session, paths=["src/d.py"], req=2)))
        assert raw.reply().token > decided.token
        tokens = [e["token"] for e in _granted_events(repo) if e["agent"] == "retrier"]
        assert len(tokens) == len(set(tokens)) == 3
    finally:
        raw.close()


def test_reclaiming_a_path_held_exclusively_returns_the_existing_grant(repo, coordinator):
    coordinator(*STEADY)
    first = cli("claim", "src/app.py", "--agent", "alice", "--json", cwd=repo.root).json
    for _ in range(5):
        again = cli("claim", "src/app.py", "--agent", "alice", "--json", cwd=repo.root).json
        assert again["token"] == first["token"]
    assert len(_granted_events(repo)) == 1
    # a different access mode is a new grant
    shared = cli("claim", "src/lib.py", "--shared", "--agent", "alice", "--json", cwd=repo.root).json
    exclusive = cli("claim", "src/lib.py", "--agent", "alice", "--json", cwd=repo.root).json
    assert exclusive["token"] > shared["token"]
    assert cli("claim", "src/lib.py", "--agent", "alice", "--json", cwd=repo.root).json["token"] == exclusive["token"]


# ------------------------------------------------------------------ bounded answers


def test_a_glob_claim_against_thousands_of_claims_lists_the_first_conflicts_and_counts_all(repo, coordinator):
    coordinator(*STEADY)
    raw = RawClient(status(repo)["endpoints"][0])
    try:
        raw.send(encode(m.Hello(agent="hoarder", req=1)))
        hoarder = raw.reply().session
        raw.send(encode(m.Claim(session=hoarder, paths=[f"src/f{i}.py" for i in range(3000)], req=2)))
        assert isinstance(raw.reply(), m.Granted)
        raw.send(encode(m.Hello(agent="globber", req=3)))
        globber = raw.reply().session
        raw.send(encode(m.Claim(session=globber, paths=["src/**"], req=4)))
        raw.sock.poll(5000)
        frame = raw.sock.recv_multipart()[-1]
        refused = decode_reply(frame)
        assert isinstance(refused, m.Refused)
        assert len(refused.conflicts) == 20 and refused.conflicts_total == 3000
        assert "and 2980 more conflicts" in refused.reason
        assert len(frame) < 10_000
        raw.send(encode(m.Intent(session=globber, paths=[f"src/f{i}.py" for i in range(100)], req=5)))
        decision = raw.reply()
        assert decision.verdict == "block" and len(decision.conflicts) == 20 and decision.conflicts_total == 100
    finally:
        raw.close()
    conn = sqlite3.connect(f"file:{repo.state_dir / 'ledger.db'}?mode=ro", uri=True)
    try:
        (size,) = conn.execute("select max(length(data)) from events where kind in ('claim.refused', 'intent.decided')").fetchone()
    finally:
        conn.close()
    assert size < 10_000
