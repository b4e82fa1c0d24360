"""Where a repository's coordinator lives, so every worktree finds it without flags.

* The repository is identified by its git *common* dir (shared by all worktrees); the
  state directory is ``<common dir>/lockstep`` (mode 0700), or ``./.lockstep`` outside
  git.  It holds ``coordinator.json`` (pid, endpoints), ``ledger.db``, ``coordinator.log``
  and ``serve.lock``.
* Default endpoints are ipc sockets in the state directory.  Unix socket paths are
  limited to ~107 bytes; for a deeper state directory the sockets go to a private
  runtime directory (``$XDG_RUNTIME_DIR/lockstep``, else ``<tmp>/lockstep-<uid>``),
  created 0700 and refused unless it is a real directory owned by this user, under a
  short name hashed from the state directory.  The state file names them, so every
  worktree still finds them.  Never an abstract socket (``ipc://@name``): it has no
  file permissions, so any local user could connect and act as any agent.
* Socket files, the state file and ``coordinator.log`` are 0600.
* ``serve.lock`` is held with ``flock`` while a coordinator runs: the kernel drops it
  when the process dies, so a state file left by a killed coordinator never stops the
  next ``serve``.
* Only ipc and loopback tcp endpoints are accepted without authentication; a
  non-loopback tcp endpoint only with CURVE on (``serve --curve``, see
  ``protocol.curve``).  A clone on another host that ran ``lockstep join`` has no
  coordinator here: its ``remote.json`` names the coordinator's endpoint and keys.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path
from typing import NamedTuple

from protocol.errors import PeerError, UsageError

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
    start = Path(cwd or current_directory()).resolve()
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


def current_directory() -> str:
    """The working directory; one that was removed (a worktree deleted under a shell) is
    bad input said in one line, not a FileNotFoundError from ``os.getcwd``."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise UsageError("the current directory no longer exists (removed?): cd into a worktree of the repository",
                         code="bad_path") from None


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

    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:16]
    runtime = private_runtime_dir()
    rpc, pub = runtime / f"{digest}-rpc.sock", runtime / f"{digest}-pub.sock"
    if len(str(pub)) > IPC_PATH_LIMIT:
        raise UsageError(
            f"no short enough place for the coordinator's sockets: {pub} is over {IPC_PATH_LIMIT} bytes; "
            "set XDG_RUNTIME_DIR or TMPDIR to a shorter directory, or pass --endpoint"
        )
    return f"ipc://{rpc}", f"ipc://{pub}"


def private_runtime_dir() -> Path:
    """A directory only this user can enter, for sockets that do not fit in the state
    directory: ``$XDG_RUNTIME_DIR/lockstep`` when that is usable, else
    ``<tmp>/lockstep-<uid>``.  Created 0700; refused if it is a symlink, not a
    directory, or owned by someone else (in a shared temp dir another user could have
    made it first)."""
    import tempfile

    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and os.path.isdir(xdg):
        return _private_dir(Path(xdg) / "lockstep")
    return _private_dir(Path(tempfile.gettempdir()) / f"lockstep-{os.getuid()}")


def _private_dir(path: Path) -> Path:
    import stat

    try:
        path.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise UsageError(f"cannot make the private socket directory {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"refusing to use {path} for sockets: it is not a plain directory (a symlink?)")
    if info.st_uid != os.getuid():
        raise UsageError(f"refusing to use {path} for sockets: it belongs to uid {info.st_uid}, not to you ({os.getuid()})")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def check_endpoint(endpoint: str, curve: bool = False, *, to_connect: bool = False) -> str:
    """Refuse anything but ipc files and loopback tcp, unless ``curve`` (every peer
    authenticated by its key): then any tcp address.  ``to_connect``: a client's
    endpoint, where port 0 (serve's "pick a free port") names nothing to reach."""
    if endpoint.startswith("ipc://@"):
        raise PeerError(
            "bad_request",
            f"refusing to use {endpoint}: an abstract unix socket has no file permissions, so any local user "
            "could connect and act as any agent; use ipc://PATH (a socket file in a private directory)",
        )
    if endpoint.startswith("ipc://"):
        if endpoint == "ipc://":
            raise PeerError("bad_request", "ipc:// names no socket file: use ipc://PATH")
        return endpoint
    if endpoint.startswith("tcp://"):
        import ipaddress  # only for tcp endpoints

        address, colon, port = endpoint[len("tcp://") :].rpartition(":")
        if not (colon and address and (port.isdigit() or port == "*")):  # serve reads the port to put PUB beside it
            raise PeerError("bad_request", f"{endpoint!r} is not tcp://HOST:PORT (a port number, or * to pick one)")
        if port.isdigit() and not (1 if to_connect else 0) <= int(port) <= 65535:  # zmq took 99999 and waited for an answer
            raise PeerError("bad_request", f"{endpoint!r}: port {port} is not a tcp port to {'connect to' if to_connect else 'serve on'} (1 to 65535)")
        host = address.strip("[]")
        if host == "localhost" or curve:
            return endpoint
        try:
            if ipaddress.ip_address(host).is_loopback:
                return endpoint
        except ValueError:
            pass
        raise PeerError(
            "bad_request",
            f"refusing to use {endpoint}: without --curve only ipc:// and loopback tcp:// (127.0.0.1, [::1]) are "
            "allowed, because anyone who can reach the socket could act as any agent; "
            "`lockstep serve --endpoint tcp://ADDR:PORT --curve` authenticates every peer by its key",
        )
    raise PeerError("bad_request", f"unsupported endpoint {endpoint!r}: use ipc://PATH or tcp://127.0.0.1:PORT")


def read_state(state_dir: Path) -> dict | None:
    """The running coordinator's state file, or None when there is none or it is not
    the shape the coordinator writes (a hand-edited or damaged file is no coordinator,
    not a traceback in every command that looks for one)."""
    try:
        info = json.loads((state_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return info if _well_formed_state(info) else None


def _well_formed_state(info: object) -> bool:
    if not isinstance(info, dict) or not isinstance(info.get("pid"), int) or isinstance(info.get("pid"), bool):
        return False
    lists = [info.get(key, []) for key in ("endpoints", "pub")]
    return all(isinstance(items, list) and all(isinstance(item, str) for item in items) for items in lists)


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
        return check_endpoint(endpoint, to_connect=True)
    info = read_state(place.state_dir)
    if info and info.get("endpoints"):
        return info["endpoints"][0]
    from . import curve  # a clone on another host: joined with `lockstep join`

    remote = curve.read_remote(place.state_dir)
    if remote is not None:
        curve.remember_remote(remote)
        return remote["endpoints"][0]
    return None
