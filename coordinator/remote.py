"""Agents on other hosts: CURVE keys, the ZAP handler, and what a key may ask.

With ``serve --endpoint tcp://ADDR:PORT --curve`` the coordinator listens twice: its
usual ipc sockets for local agents (private by file permissions) and a CURVE ROUTER +
PUB on the tcp endpoint for everyone else.  libzmq does the crypto; this module decides
who gets in and what each key may do.

* **The ZAP handler** (``serve_zap``) runs on the trio loop, not in a thread: it reads
  the same ``KeyStore`` the request loop reads, so ``keys revoke`` is one dict update,
  effective for the next handshake with no lock and no reload, and every refusal is
  counted where ``status`` reads it.  (pyzmq's ``ThreadAuthenticator`` would keep the
  allowed keys in a thread of its own, loaded from a directory of certificates.)  It
  admits enrolled keys and unused, unexpired enrollment keys; the User-Id it returns is
  the key itself, so each message carries the key it came with.
* **Every message is checked again** (``admit``) before the core sees it: a key revoked
  while connected is refused at its next message (and its open subscription is cut:
  the server closes the remote PUB and binds it again, ``_cut_remote_subscribers``); an enrollment key may only enroll;
  a key acts only as its bound name (``hello``'s agent, a session's owner), anything
  else is ``forbidden``, counted, logged and published; operator requests (shutdown,
  forced release, abandon, keys) are for the coordinator's host only; ``plan stop``
  stops only the plans the key's agent runs.  A ``hello`` gets
  the coordinator's own repository (the clone was recognised by its root commits at
  enrollment) and a host name marked remote, so no local pid is ever watched for it
  (a ``watch`` from another host is recorded, never acted on).
* Probes of a remote agent run on its own host, by ``lockstep worker`` (workers.py),
  which connects with the agent's key and may serve only the key's name.
* Keys live in ``keys.json`` in the private state directory (0600).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import msgspec

from protocol import curve
from protocol import messages as m
from protocol.curve import root_commits
from protocol.errors import PeerError

log = logging.getLogger("lockstep")

KEYS_FILE = "keys.json"
# Prefix of a remote peer's id.  The local ROUTER's ids are a zero byte and a counter
# (it would take ~4 billion connections to reach this prefix), and ids a peer sets
# itself never start with a zero byte: no local peer can pass for a remote one.
REMOTE_PEER = b"\x00\xff\xff"
INVITE_TTL = 3600.0
ZAP_ENDPOINT = "inproc://zeromq.zap.01"

# Requests only the coordinator's own host may send.
_OPERATOR = (m.Shutdown, m.Abandon, m.Keys, m.Compact)
# A remote host's name as sessions and ``status`` show it: marked so that nothing of
# this host (pid watches, uncommitted-work checks, probes) is ever tried on it.
REMOTE_MARK = "(remote, key of "


class KeyStore:
    """Enrolled keys, revoked keys and open invitations, saved on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, dict] = {}  # public key (Z85) -> {name, state, host, since}
        self.invites: dict[str, dict] = {}  # enrollment public key -> {name, expires, since}
        try:
            import json

            data = json.loads(path.read_text())
            self.keys = dict(data.get("keys", {}))
            self.invites = dict(data.get("invites", {}))
            _check_entries(self.keys, self.invites)
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            raise OSError(f"unreadable key store {path}: {exc}; repair it, or remove it (every remote agent then joins again)") from None

    def save(self) -> None:
        curve.write_private(self.path, {"keys": self.keys, "invites": self.invites})

    def live_invite(self, key: str, now: float) -> dict | None:
        invite = self.invites.get(key)
        return invite if invite is not None and invite["expires"] > now else None

    def invite(self, name: str, ttl: float, now: float) -> bytes:
        """A new enrollment keypair for ``name``; returns its secret (for the token)."""
        public, secret = _keypair()
        self.invites = {k: v for k, v in self.invites.items() if v["expires"] > now}  # forget expired ones
        self.invites[public.decode()] = {"name": name, "expires": now + ttl, "since": now}
        self.save()
        return secret

    def enroll(self, invite_key: str, key: str, host: str, now: float) -> str:
        invite = self.invites.pop(invite_key)
        self.keys[key] = {"name": invite["name"], "state": "enrolled", "host": host, "since": now}
        self.save()
        return invite["name"]

    def revoke(self, name: str, now: float) -> list[str]:
        revoked = [k for k, v in self.keys.items() if v["name"] == name and v["state"] == "enrolled"]
        for k in revoked:
            self.keys[k] = {**self.keys[k], "state": "revoked", "since": now}
        dropped = [k for k, v in self.invites.items() if v["name"] == name]
        for k in dropped:
            del self.invites[k]
        if revoked or dropped:
            self.save()
        return revoked + dropped

    def listing(self, now: float) -> list[m.KeyInfo]:
        out = [m.KeyInfo(name=v["name"], key=k, state=v["state"], host=v.get("host", ""), since=v["since"]) for k, v in self.keys.items()]
        out += [
            m.KeyInfo(name=v["name"], key=k, state="invited", since=v["since"], expires=v["expires"])
            for k, v in self.invites.items()
            if v["expires"] > now
        ]
        return sorted(out, key=lambda info: (info.name, info.since))


def _check_entries(keys: dict, invites: dict) -> None:
    """Every entry as ``save`` writes it, or ``ValueError`` naming the first that is
    not: a damaged entry read as it is failed every later ``keys``/``invite``/``status``
    request (and handshake) with an internal error, while the coordinator served on."""
    number = (int, float)
    for key, entry in keys.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry.get("state") in ("enrolled", "revoked")
                and isinstance(entry.get("since"), number) and isinstance(entry.get("host", ""), str)):
            raise ValueError(f"key {key!r} is not an entry with a name, a state (enrolled or revoked) and a time")
    for key, entry in invites.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("expires"), number) and isinstance(entry.get("since"), number)):
            raise ValueError(f"invitation {key!r} is not an entry with a name, an expiry and a time")


def _keypair() -> tuple[bytes, bytes]:
    import zmq

    return zmq.curve_keypair()


class RemoteGate:
    """The coordinator's side of remote agents: keys, counts, and the checks."""

    def __init__(self, state_dir: Path, repo: str, worktree: Path, endpoints: list[str], pub: list[str]) -> None:
        self.public, self.secret = curve.coordinator_keypair(state_dir)
        self.store = KeyStore(state_dir / KEYS_FILE)
        self.repo = repo
        self.roots = root_commits(worktree)
        self.endpoints = endpoints  # the CURVE endpoints (request, publication)
        self.pub = pub
        self.key_of: dict[bytes, str] = {}  # remote peer id -> the key it authenticated with
        self.counts = {"handshakes": 0, "refused_unknown_key": 0, "refused_revoked_key": 0, "forbidden": 0, "enrolled": 0, "publication_rebinds": 0}

    # -- ZAP (at each CURVE handshake) --------------------------------------------------

    def zap_answer(self, request: list[bytes]) -> list[bytes]:
        """The reply to one ZAP request (RFC 27): 200 with the key as User-Id, or 400."""
        if len(request) < 6:
            return [b"1.0", request[1] if len(request) > 1 else b"", b"400", b"bad ZAP request", b"", b""]
        version, request_id, _domain, address, _identity, mechanism = request[:6]
        if version != b"1.0" or mechanism != b"CURVE" or len(request) < 7 or len(request[6]) != 32:
            self.counts["refused_unknown_key"] += 1
            return [b"1.0", request_id, b"400", b"CURVE only", b"", b""]
        from zmq.utils import z85

        key = z85.encode(request[6]).decode()
        entry = self.store.keys.get(key)
        now = time.time()
        if entry is not None and entry["state"] == "enrolled" or self.store.live_invite(key, now) is not None:
            self.counts["handshakes"] += 1
            return [b"1.0", request_id, b"200", b"OK", key.encode(), b""]
        which = "refused_revoked_key" if entry is not None else "refused_unknown_key"
        self.counts[which] += 1
        log.warning("refused a CURVE handshake from %s: %s key %s", address.decode(errors="replace"), which.split("_")[1], key)
        return [b"1.0", request_id, b"400", b"unknown or revoked key", b"", b""]

    # -- every message from a remote peer -----------------------------------------------

    def admit(self, peer: bytes, message, registry) -> tuple[object, PeerError | None, str]:
        """(the message to hand on, or the refusal, and a note for the log/publication
        when the refusal is an impersonation)."""
        key = self.key_of.get(peer, "")
        entry = self.store.keys.get(key)
        now = time.time()
        if entry is None:
            if self.store.live_invite(key, now) is not None:
                if isinstance(message, m.Enroll):
                    return message, None, ""
                return message, PeerError("forbidden", "an enrollment key may only enroll (`lockstep join TOKEN`)"), ""
            self.counts["refused_unknown_key"] += 1
            return message, PeerError("revoked", "this key is not enrolled here (any more)"), ""
        if entry["state"] != "enrolled":
            self.counts["refused_revoked_key"] += 1
            return message, PeerError("revoked", f"the key of {entry['name']} was revoked; ask for a new invitation"), ""
        name = entry["name"]
        if isinstance(message, _OPERATOR) or (isinstance(message, m.Release) and (message.force or message.session is None)):
            return self._forbidden(message, name, f"{type(message).__name__.lower()} is for the coordinator's host only")
        if isinstance(message, m.Enroll):
            return self._forbidden(message, name, "this key is enrolled already")
        if isinstance(message, m.JobQuery) and message.stop:
            # Its own plans only: the job runner checks whose the plan is (``stop_plan``,
            # told the key's name); the stop is recorded as the key's name's.
            return msgspec.structs.replace(message, by=name), None, ""
        if isinstance(message, m.Hello):
            if message.agent != name:
                return self._forbidden(message, name, f"the key of {name} may not act as {message.agent}")
            host = f"{message.host or '?'} {REMOTE_MARK}{name})"
            return msgspec.structs.replace(message, repo=self.repo, host=host, pid=None, pid_started=None), None, ""
        if isinstance(message, m.WorkerReady) and message.agent != name:
            return self._forbidden(message, name, f"the key of {name} may not run {message.agent}'s probes")
        session = getattr(message, "session", None)
        sends = isinstance(message, m.SendText) or (isinstance(message, m.Tasks) and message.op != "list")
        if sends and session is None:  # a message or task with no sender is the operator's
            return self._forbidden(message, name, f"{name} sends and queues as itself: with its session")
        if session is not None:
            agent = registry.sessions.get(session)
            if agent is not None and agent.name != name:
                return self._forbidden(message, name, f"the key of {name} may not act in {agent.name}'s session")
        return message, None, ""

    def name_of(self, peer: bytes) -> str:
        """The agent name the key of a remote peer is bound to ("" if none)."""
        entry = self.store.keys.get(self.key_of.get(peer, ""))
        return entry["name"] if entry is not None else ""

    def forbidden(self, message, name: str, why: str) -> None:
        """Count and log a refusal decided elsewhere (the job runner's, for a plan)."""
        self._forbidden(message, name, why)

    def _forbidden(self, message, name: str, why: str):
        self.counts["forbidden"] += 1
        log.warning("forbidden: %s (%s)", why, type(message).__name__)
        return message, PeerError("forbidden", why), why

    # -- enrollment and the operator's requests -----------------------------------------

    def enroll(self, peer: bytes, message: m.Enroll) -> m.Reply:
        if self.roots and message.roots and not set(message.roots) & set(self.roots):
            raise PeerError(
                "wrong_repo",
                f"this clone is another repository: its root commit(s) {', '.join(r[:12] for r in message.roots)} "
                f"are not this coordinator's ({', '.join(r[:12] for r in self.roots)})",
            )
        if len(message.key) != 40:
            raise PeerError("bad_request", "key must be a Z85 CURVE public key (40 characters)")
        if message.key in self.store.keys:
            raise PeerError("bad_request", "this public key is enrolled already; make a new keypair")
        name = self.store.enroll(self.key_of.get(peer, ""), message.key, message.host, time.time())
        self.counts["enrolled"] += 1
        log.info("enrolled a key for %s from %s", name, message.host or "?")
        return m.Enrolled(req=message.req, agent=name, repo=self.repo)

    def keys_request(self, message: m.Keys) -> m.Reply:
        now = time.time()
        if message.op == "list":
            return m.KeysReply(req=message.req, keys=self.store.listing(now))
        from .core import check_agent_name

        check_agent_name(message.name)
        if message.op == "invite":
            ttl = INVITE_TTL if message.ttl is None else message.ttl
            if not 0 < ttl < 366 * 86400:
                raise PeerError("bad_request", f"ttl must be positive and under a year, not {ttl}")
            secret = self.store.invite(message.name, ttl, now)
            token = curve.make_token(message.name, self.endpoints, self.pub, self.public, secret)
            log.info("invited %s (valid %gs)", message.name, ttl)
            return m.KeysReply(req=message.req, token=token, message=f"invited {message.name}; the token works once, for {ttl:g}s")
        revoked = self.store.revoke(message.name, now)
        if not revoked:
            raise PeerError("not_found", f"no key or invitation for {message.name}")
        log.warning("revoked the key(s) of %s", message.name)
        return m.KeysReply(req=message.req, keys=self.store.listing(now), message=f"revoked {len(revoked)} key(s) of {message.name}")

    def statistics(self) -> dict:
        live = sum(1 for v in self.store.keys.values() if v["state"] == "enrolled")
        return {"endpoints": self.endpoints, "keys": live, **self.counts}


