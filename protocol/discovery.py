"""Where a repository's coordinator lives, so every worktree finds it without flags.

* The repository is identified by its git *common* dir (shared by all worktrees); the
  state directory is ``<common dir>/lockstep`` (mode 0700), or ``./.lockstep`` outside
  git.  It holds ``coordinator.json`` (pid, endpoints), ``ledger.db``, ``coordinator.log``
  and ``serve.lock``.
* Default endpoints are ipc sockets in the state directory.  Unix socket paths are
  limited to ~107 bytes; deeper state directories use Linux's abstract namespace with a
  name hashed from the state directory, so each repository still gets its own.
* ``serve.lock`` is held with ``flock`` while a coordinator runs: the kernel drops it
  when the process dies, so a state file left by a killed coordinator never stops the
  next ``serve``.
* Only ipc and loopback tcp endpoints are accepted: there is no authentication yet.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from protocol.errors import PeerError

STATE_FILE = "coordinator.json"
LEDGER_FILE = "ledger.db"
LOG_FILE = "coordinator.log"
LOCK_FILE = "serve.lock"
IPC_PATH_LIMIT = 100  # sun_path is 108 bytes on Linux, minus "ipc://" slack


class Place(NamedTuple):
    """A repository as Lockstep sees it from some working directory.

    (A NamedTuple, not a dataclass: every one-shot CLI call locates its repository,
    and ``dataclasses`` costs a few milliseconds of its start-up.)"""

    worktree: Path  # the top of the worktree (or the directory, outside git)
    repo_id: str  # the git common dir, resolved: the same for every worktree
    state_dir: Path
    in_git: bool


def locate(cwd: str | os.PathLike | None = None) -> Place:
    start = Path(cwd or os.getcwd()).resolve()
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "--git-common-dir"],
            cwd=start,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        inside = _inside_git_dir(start)
        if inside is not None:
            return inside
        return Place(worktree=start, repo_id=str(start), state_dir=start / ".lockstep", in_git=False)
    worktree = Path(out[0]).resolve()
    common = (start / out[1]).resolve()
    return Place(worktree=worktree, repo_id=str(common), state_dir=common / "lockstep", in_git=True)


def _inside_git_dir(start: Path) -> Place | None:
    """From inside ``.git`` (where git commands work but there is no work tree): the
    same repository, so ``lockstep status`` answers there as ``git log`` does."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--git-common-dir", "--is-inside-git-dir"], cwd=start, capture_output=True, text=True, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return None
    if len(out) < 2 or out[1] != "true":
        return None
    common = (start / out[0]).resolve()
    worktree = common.parent if common.name == ".git" else common
    return Place(worktree=worktree, repo_id=str(common), state_dir=common / "lockstep", in_git=True)


def ensure_state_dir(place: Place) -> Path:
    place.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(place.state_dir, 0o700)  # private: anyone who reaches the socket is any agent
    return place.state_dir


def default_endpoints(state_dir: Path) -> tuple[str, str]:
    """(request endpoint, publication endpoint) for this state directory."""
    rpc, pub = state_dir / "rpc.sock", state_dir / "pub.sock"
    if len(str(pub)) <= IPC_PATH_LIMIT:
        return f"ipc://{rpc}", f"ipc://{pub}"
    import hashlib  # only for deep state directories

    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:20]
    if sys.platform.startswith("linux"):
        return f"ipc://@lockstep-{digest}-rpc", f"ipc://@lockstep-{digest}-pub"
    runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp")
    return f"ipc://{runtime}/lockstep-{digest}-rpc", f"ipc://{runtime}/lockstep-{digest}-pub"


def check_endpoint(endpoint: str) -> str:
    """Refuse anything but ipc and loopback tcp: there is no authentication yet."""
    if endpoint.startswith("ipc://"):
        return endpoint
    if endpoint.startswith("tcp://"):
        import ipaddress  # only for tcp endpoints

        host = endpoint[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
        if host == "localhost":
            return endpoint
        try:
            if ipaddress.ip_address(host).is_loopback:
                return endpoint
        except ValueError:
            pass
        raise PeerError(
            "bad_request",
            f"refusing to use {endpoint}: only ipc:// and loopback tcp:// (127.0.0.1, [::1]) are allowed, "
            "because anyone who can reach the socket can act as any agent (no authentication yet)",
        )
    raise PeerError("bad_request", f"unsupported endpoint {endpoint!r}: use ipc://PATH or tcp://127.0.0.1:PORT")


def read_state(state_dir: Path) -> dict | None:
    try:
        return json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def write_state(state_dir: Path, info: dict) -> None:
    path = state_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def remove_state(state_dir: Path, pid: int) -> None:
    """Remove the state file if it is still ours."""
    info = read_state(state_dir)
    if info is not None and info.get("pid") == pid:
        (state_dir / STATE_FILE).unlink(missing_ok=True)


class AlreadyServing(Exception):
    def __init__(self, info: dict | None) -> None:
        self.info = info or {}
        super().__init__(self.info)


def acquire_serve_lock(state_dir: Path) -> int:
    """Hold ``serve.lock`` for the life of this process, or raise ``AlreadyServing``."""
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyServing(read_state(state_dir)) from None
    return fd


def discover_endpoint(place: Place, override: str | None = None) -> str | None:
    """The request endpoint: ``--endpoint`` > ``LOCKSTEP_ENDPOINT`` > the state file."""
    endpoint = override or os.environ.get("LOCKSTEP_ENDPOINT")
    if endpoint:
        return check_endpoint(endpoint)
    info = read_state(place.state_dir)
    if info and info.get("endpoints"):
        return info["endpoints"][0]
    return None
