"""Real parts for integration tests: git repositories with worktrees, a coordinator
process, CLI calls and scriptable agent processes.  Every process a test starts is
ended by its fixture; every wait has a deadline."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

PROJECT = Path(__file__).resolve().parents[2]
LOCKSTEP = [sys.executable, "-m", "agents.cli"]


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)  # polling a state with a deadline, not synchronising by sleep


def env_for(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env["PYTHONPATH"] = str(PROJECT) + os.pathsep + env.get("PYTHONPATH", "")
    env["LOCKSTEP_TIMEOUT"] = "3"
    env.update(extra or {})
    return env


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def bare_origin(worktree: Path, tmp_path: Path, push: str | None = "main") -> Path:
    """A bare repository (``tmp_path/remote.git``) added as ``worktree``'s ``origin``,
    with ``push`` (a refspec) pushed to it: somewhere for the push guard to guard."""
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(worktree, "remote", "add", "origin", str(remote))
    if push is not None:
        _git(worktree, "push", "-q", "origin", push)
    return remote


@dataclass
class Repo:
    root: Path  # the main worktree
    other: Path  # a second worktree of the same repository

    @property
    def state_dir(self) -> Path:
        return self.root / ".git" / "lockstep"


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "repo")


def make_repo(root: Path) -> Repo:
    """A git repository with one commit and a second worktree beside it."""
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "init")
    other = root.parent / "wt-bob"
    _git(root, "worktree", "add", "-q", str(other))
    return Repo(root=root, other=other)


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def json(self):
        return json.loads(self.out)


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 30) -> Result:
    proc = subprocess.run([*LOCKSTEP, *args], cwd=cwd, env=env_for(env), capture_output=True, text=True, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def end_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGCONT)
            proc.send_signal(sig)
            proc.wait(grace)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            proc.kill()
            proc.wait(grace)


class Coordinator:
    def __init__(self, repo: Repo, args: tuple[str, ...]) -> None:
        self.repo = repo
        self.args = args
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Coordinator":
        self.proc = subprocess.Popen(
            [*LOCKSTEP, "serve", *self.args],
            cwd=self.repo.root,
            env=env_for(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_until(self._ready, timeout=20, what="the coordinator to serve")
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"coordinator exited with {self.proc.returncode}: {self.proc.stderr.read()}")
        path = self.repo.state_dir / "coordinator.json"
        try:
            return json.loads(path.read_text()).get("pid") == self.proc.pid
        except (OSError, ValueError):
            return False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc)


@pytest.fixture
def coordinator_in():
    """``coordinator_in(repo, *serve_args)`` starts one; all are ended afterwards."""
    started: list[Coordinator] = []

    def start(repo: Repo, *args: str) -> Coordinator:
        c = Coordinator(repo, args).start()
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


@pytest.fixture
def coordinator(repo: Repo, coordinator_in):
    """``coordinator(*serve_args)`` starts one for ``repo``."""
    return lambda *args: coordinator_in(repo, *args)


class AgentProc:
    """A ``tests.integration.agent_proc`` process: JSON commands in, JSON results out."""

    def __init__(self, name: str, cwd: Path, kind: str = "session") -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.agent_proc", name, "--kind", kind],
            cwd=cwd,
            env=env_for(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        self.notices: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.next(timeout=20)
        assert ready.get("event") == "ready", ready
        self.session = ready["session"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def next(self, timeout: float = 10) -> dict:
        while True:
            try:
                item = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"agent {self.name} said nothing for {timeout}s; stderr: {self._stderr()}") from None
            if item is None:
                raise AssertionError(f"agent {self.name} exited: {self._stderr()}")
            if item.get("event") == "notice":
                self.notices.append(item["text"])
                continue
            return item

    def _stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None else "(still running)"

    def do(self, op: str, timeout: float = 10, **fields) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return self.next(timeout)

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def end(self) -> None:
        end_process(self.proc)


@pytest.fixture
def agents():
    """``agents(name, cwd)`` starts an agent process; all are ended afterwards."""
    started: list[AgentProc] = []

    def start(name: str, cwd: Path, kind: str = "session") -> AgentProc:
        a = AgentProc(name, cwd, kind)
        started.append(a)
        return a

    yield start
    for a in started:
        a.end()


def status(repo: Repo) -> dict:
    result = cli("status", "--json", cwd=repo.root)
    assert result.rc == 0, result
    return result.json


def agent_state(repo: Repo, name: str) -> str | None:
    return next((a["state"] for a in status(repo)["agents"] if a["name"] == name), None)


def holders(repo: Repo) -> dict[str, str]:
    return {c["pattern"]: c["holder"] for c in status(repo)["claims"]}


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
