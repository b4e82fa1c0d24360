"""`lockstep top` in a real terminal (tmux): ages move, keys filter and quit, and a check
already running when it opens is on screen."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import uuid

import pytest

from .conftest import LOCKSTEP, cli, end_process, env_for, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")


class Tmux:
    """One private tmux server (its own socket) running ``lockstep top`` in a pane."""

    def __init__(self, cwd, width: int = 110, height: int = 60, stdin_closed: bool = False) -> None:
        self.socket = f"lockstep-test-{uuid.uuid4().hex[:12]}"
        command = " ".join(shlex.quote(part) for part in [*LOCKSTEP, "top"]) + (" <&-" if stdin_closed else "")
        self._tmux("new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height), "-c", str(cwd), command, env=env_for())
        self._tmux("set-option", "-t", "top", "remain-on-exit", "on")

    def _tmux(self, *args: str, env: dict | None = None) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True, timeout=10, env=env).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "top", *keys)

    def exited(self) -> bool:
        return self._tmux("list-panes", "-t", "top", "-F", "#{pane_dead}").strip() == "1"

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def tmux_top():
    started: list[Tmux] = []

    def start(cwd, stdin_closed: bool = False) -> Tmux:
        pane = Tmux(cwd, stdin_closed=stdin_closed)
        started.append(pane)
        return pane

    yield start
    for pane in started:
        pane.kill()


def _age_of(screen: str, name: str) -> float | None:
    """The heartbeat age on the agents table's row for ``name`` (seconds)."""
    for line in screen.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if name in cells:
            for cell in cells:
                if re.fullmatch(r"\d+\.\ds", cell):
                    return float(cell[:-1])
    return None


def test_top_in_a_terminal_moves_ages_filters_and_quits_on_q(repo, coordinator, tmux_top):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    assert cli("claim", "--agent", "bob", "src/other.py", cwd=repo.other).rc == 0
    check = subprocess.Popen(
        [*LOCKSTEP, "check", "command", "--agent", "carol", "--timeout", "30", "--", "sleep", "30"],
        cwd=repo.root, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: cli("top", "--once", "--json", cwd=repo.root).json["jobs"], what="the check to be running")
        pane = tmux_top(repo.root)
        # a frame is read while it may still be drawn: wait for one with the agents and the job
        shown = lambda: (screen := pane.screen()) and _age_of(screen, "alice") is not None and "check" in screen and screen  # noqa: E731
        first = wait_until(shown, timeout=20, what="top's first frame with alice and carol's job")
        assert "carol" in first  # the job that was running when top opened, and its agent
        age = _age_of(first, "alice")
        wait_until(lambda: (_age_of(pane.screen(), "alice") or 0) >= age + 1.0, timeout=10, what="alice's age to move")

        pane.keys("/", "bob", "Enter")
        applied = lambda: (screen := pane.screen()) and "filter: bob" in screen and "Enter applies" not in screen  # noqa: E731
        wait_until(applied, what="the filter to apply")
        screen = pane.screen()
        assert _age_of(screen, "bob") is not None and _age_of(screen, "alice") is None

        pane.keys("q")
        wait_until(pane.exited, timeout=10, what="top to quit on q")
    finally:
        end_process(check)


def test_top_with_stdin_closed_shows_the_view_and_quits_on_ctrl_c(repo, coordinator, tmux_top):
    """No keys without a stdin (`<&-`): the view still shows, and Ctrl-C quits it; it
    was a traceback (sys.stdin is None)."""
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    pane = tmux_top(repo.root, stdin_closed=True)
    wait_until(lambda: "src/app.py" in pane.screen(), timeout=20, what="the live view with alice's claim")
    pane.keys("C-c")
    wait_until(pane.exited, timeout=10, what="top to quit on Ctrl-C")
    assert "Traceback" not in pane.screen()
