"""What a remote key may ask (coordinator.remote), without sockets: the ZAP answer for
each kind of key, and the per-message checks."""

from __future__ import annotations

from types import SimpleNamespace

import zmq
from zmq.utils import z85

from coordinator.remote import REMOTE_PEER, RemoteGate
from protocol import messages as m


def _gate(tmp_path):
    return RemoteGate(tmp_path, "/repo/.git", tmp_path, ["tcp://10.0.0.1:7400"], ["tcp://10.0.0.1:7401"])


def _zap(gate, public: bytes) -> bytes:
    request = [b"1.0", b"1", b"lockstep", b"10.0.0.2", b"", b"CURVE", z85.decode(public)]
    return gate.zap_answer(request)[2]


def _enrolled(gate, name: str) -> tuple[bytes, str]:
    """An enrolled key for ``name`` and the peer id its connection has."""
    gate.keys_request(m.Keys(op="invite", name=name))
    invite_key = next(k for k, v in gate.store.invites.items() if v["name"] == name)
    public, _ = zmq.curve_keypair()
    peer = REMOTE_PEER + name.encode()
    gate.key_of[peer] = invite_key
    assert gate.enroll(peer, m.Enroll(key=public.decode())).agent == name
    gate.key_of[peer] = public.decode()
    return peer, public.decode()


def test_the_zap_handler_admits_enrolled_and_invited_keys_only(tmp_path):
    gate = _gate(tmp_path)
    stranger, _ = zmq.curve_keypair()
    assert _zap(gate, stranger) == b"400"
    gate.keys_request(m.Keys(op="invite", name="alice"))
    invite_key = next(iter(gate.store.invites)).encode()
    assert _zap(gate, invite_key) == b"200"
    _, key = _enrolled(gate, "alice")
    assert _zap(gate, invite_key) == b"400"  # one-time
    assert _zap(gate, key.encode()) == b"200"
    gate.keys_request(m.Keys(op="revoke", name="alice"))
    assert _zap(gate, key.encode()) == b"400"
    assert gate.counts["refused_unknown_key"] == 2 and gate.counts["refused_revoked_key"] == 1
    assert (tmp_path / "keys.json").stat().st_mode & 0o777 == 0o600


def test_a_key_acts_only_as_its_name(tmp_path):
    gate = _gate(tmp_path)
    peer, _ = _enrolled(gate, "alice")
    registry = SimpleNamespace(sessions={"1.1": SimpleNamespace(name="alice"), "1.2": SimpleNamespace(name="bob")})
    hello, refusal, _ = gate.admit(peer, m.Hello(agent="alice", repo="/elsewhere/.git", host="laptop", pid=42), registry)
    assert refusal is None and hello.repo == "/repo/.git" and hello.pid is None and "remote" in hello.host
    for message in [
        m.Hello(agent="bob"),
        m.Claim(session="1.2", paths=["a"]),
        m.Release(force=True, paths=["a"]),
        m.Shutdown(),
        m.Keys(op="list"),
        m.WorkerReady(agent="bob"),
        m.Verify(session="1.2"),
    ]:
        assert gate.admit(peer, message, registry)[1].code == "forbidden", message
    assert gate.admit(peer, m.Claim(session="1.1", paths=["a"]), registry)[1] is None
    assert gate.admit(peer, m.Status(), registry)[1] is None
    # Its probes go to its own worker (the job runner sends them there), and it may run one.
    assert gate.admit(peer, m.Verify(session="1.1"), registry)[1] is None
    assert gate.admit(peer, m.WorkerReady(agent="alice", host="laptop"), registry)[1] is None
    assert gate.name_of(peer) == "alice"
    gate.keys_request(m.Keys(op="revoke", name="alice"))
    assert gate.admit(peer, m.Claim(session="1.1", paths=["a"]), registry)[1].code == "revoked"
    assert gate.counts["forbidden"] == 7


def test_a_key_may_follow_and_cancel_its_jobs_and_asks_to_stop_a_plan_in_its_own_name(tmp_path):
    gate = _gate(tmp_path)
    peer, _ = _enrolled(gate, "alice")
    registry = SimpleNamespace(sessions={"1.1": SimpleNamespace(name="alice")})
    # whose plan it is, the job runner decides (told the key's name); the stop is alice's, whatever `by` says
    stop, refusal, _ = gate.admit(peer, m.JobQuery(job="deploy", stop=True, by="ops"), registry)
    assert refusal is None and stop.by == "alice"
    assert gate.admit(peer, m.JobQuery(job="3.4", cancel=True, session="1.1"), registry)[1] is None  # Ctrl-C on its own
    assert gate.admit(peer, m.JobQuery(job="3.4"), registry)[1] is None

