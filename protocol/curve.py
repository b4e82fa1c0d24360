"""Keys and tokens for agents on other machines (libzmq's CURVE), used by both sides.

* The coordinator's keypair is ``curve.key`` in its private state directory (0600),
  made on first use.  Z85 text, as libzmq takes it.
* ``lockstep invite NAME`` makes a one-time *enrollment* keypair; its secret travels in
  the join token.  ``lockstep join TOKEN`` connects with it (the coordinator's ZAP
  handler admits an enrollment key until it is used or expires), sends the agent's own
  new public key, and from then on connects with that key only.  The token is the
  secret: whoever holds it may enroll once, as NAME.
* A joined clone keeps ``remote.json`` in its own state directory (inside ``.git``,
  never tracked, 0600): endpoints, the coordinator's public key, the agent's keypair.
  Discovery reads it when no coordinator runs on this host; ``secure`` puts the keys
  on a client socket before it connects.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from . import jsontext
from .errors import UsageError

KEY_FILE = "curve.key"
REMOTE_FILE = "remote.json"
TOKEN_PREFIX = "lockstep-join-1:"

# endpoint -> (coordinator public key, our public key, our secret key): the keys
# discovery found for an endpoint, applied by ``secure`` to each socket that connects.
_credentials: dict[str, tuple[bytes, bytes, bytes]] = {}


def write_private(path: Path, data: dict) -> None:
    """Write JSON readable by this user only (created 0600, then renamed in place)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def coordinator_keypair(state_dir: Path) -> tuple[bytes, bytes]:
    """(public, secret) of this repository's coordinator, made on first use."""
    path = state_dir / KEY_FILE
    try:
        data = json.loads(path.read_text())
        return data["public"].encode(), data["secret"].encode()
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise UsageError(f"unreadable coordinator key {path}: {exc}; remove it to make a new one (every agent must join again)") from None
    import zmq

    public, secret = zmq.curve_keypair()
    write_private(path, {"public": public.decode(), "secret": secret.decode()})
    return public, secret


def public_of(secret: bytes) -> bytes:
    import zmq

    return zmq.curve_public(secret)


def make_token(name: str, endpoints: list[str], pub: list[str], server_key: bytes, secret: bytes) -> str:
    body = {"n": name, "e": endpoints, "p": pub, "k": server_key.decode(), "s": secret.decode()}
    return TOKEN_PREFIX + base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def read_token(token: str) -> dict:
    """The token's fields, or ``UsageError`` saying what is wrong with it."""
    token = token.strip()
    if not token.startswith(TOKEN_PREFIX):
        raise UsageError(f"not a join token (it starts with {TOKEN_PREFIX!r}; get one with `lockstep invite NAME` on the coordinator's host)")
    text = token[len(TOKEN_PREFIX) :]
    try:
        body = jsontext.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        fields = {
            "name": str(body["n"]),
            "endpoints": _tcp_endpoints(body["e"]),
            "pub": _tcp_endpoints(body["p"]),
            "server_key": str(body["k"]).encode(),
            "secret": str(body["s"]).encode(),
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"damaged join token ({type(exc).__name__}); copy the whole line `lockstep invite` printed") from None
    if not (_is_z85_key(fields["server_key"]) and _is_z85_key(fields["secret"])) or not fields["endpoints"]:
        raise UsageError("damaged join token (a key that is not 40 Z85 characters, or no endpoint); copy the whole line `lockstep invite` printed")
    return fields


def _tcp_endpoints(value: object) -> list[str]:
    """A token's endpoints: a list of tcp:// addresses (a coordinator serving remote
    agents listens on tcp); anything else raises ``ValueError``, as a damaged token."""
    if not isinstance(value, list) or not all(isinstance(e, str) and e.startswith("tcp://") for e in value):
        raise ValueError("endpoints")
    for endpoint in value:  # tcp:// or a port of 99999 reached zmq: a traceback, or a wait for no answer
        address, colon, port = endpoint[len("tcp://") :].rpartition(":")
        if not (colon and address and port.isdigit() and 1 <= int(port) <= 65535):
            raise ValueError("endpoints")
    return value


# Z85 (ZeroMQ RFC 32), in which libzmq takes CURVE keys: 5 characters per 4 bytes.
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}


def _is_z85_key(key: bytes) -> bool:
    """A 32-byte key in Z85: 40 characters of the alphabet, each group of 5 under 2**32
    (libzmq refuses anything else with a bare EINVAL, a traceback at join)."""
    text = key.decode("latin-1")
    if len(text) != 40 or any(c not in _Z85_VALUE for c in text):
        return False
    for start in range(0, 40, 5):
        value = 0
        for c in text[start : start + 5]:
            value = value * 85 + _Z85_VALUE[c]
        if value >= 2**32:
            return False
    return True


def read_remote(state_dir: Path) -> dict | None:
    """A joined clone's ``remote.json``; None if it never joined.  A file that is not
    what ``join`` wrote is ``UsageError`` (exit 2) saying so, not a traceback later."""
    path = state_dir / REMOTE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # a folder, unreadable, not UTF-8
        raise _damaged(path, str(exc)) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _damaged(path, f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _damaged(path, "not a JSON object")
    problem = _remote_problem(data)
    if problem:
        raise _damaged(path, problem)
    return data


def _remote_problem(data: dict) -> str:
    endpoints = data.get("endpoints")
    if not isinstance(endpoints, list) or not endpoints or not all(isinstance(e, str) and e.startswith("tcp://") for e in endpoints):
        return "endpoints is not a list of tcp:// addresses"
    pub = data.get("pub", [])
    if not isinstance(pub, list) or not all(isinstance(e, str) and e.startswith("tcp://") for e in pub):
        return "pub is not a list of tcp:// addresses"
    for name in ("server_key", "public", "secret"):
        key = data.get(name)
        if not isinstance(key, str) or not key.isascii() or not _is_z85_key(key.encode()):
            return f"{name} is not a CURVE key (40 Z85 characters)"
    if not isinstance(data.get("agent", ""), str):
        return "agent is not a name"
    return ""


def _damaged(path: Path, problem: str) -> UsageError:
    return UsageError(
        f"{path} is damaged ({problem}): join again with `lockstep join TOKEN` "
        "(a new token from `lockstep invite NAME` on the coordinator's host), or remove it to leave the coordinator"
    )


def root_commits(worktree: Path) -> list[str]:
    """The repository's root commit(s): the same in every clone of it."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-list", "--max-parents=0", "HEAD"], cwd=worktree, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return sorted(out.split())


def remember(endpoint: str, server_key: bytes, public: bytes, secret: bytes) -> None:
    _credentials[endpoint] = (server_key, public, secret)


def remember_remote(remote: dict) -> None:
    keys = (remote["server_key"].encode(), remote["public"].encode(), remote["secret"].encode())
    for endpoint in [*remote.get("endpoints", []), *remote.get("pub", [])]:
        _credentials[endpoint] = keys


def has_keys(endpoint: str) -> bool:
    """Whether discovery found CURVE keys for ``endpoint`` (a joined clone's)."""
    return endpoint in _credentials


def secure(sock, endpoint: str) -> bool:
    """Put the CURVE keys known for ``endpoint`` on a client socket (before connect);
    True if there were any."""
    keys = _credentials.get(endpoint)
    if keys is None:
        return False
    import zmq

    sock.setsockopt(zmq.CURVE_SERVERKEY, keys[0])
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys[1])
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys[2])
    return True
