"""Sessions renewed after a pause keep everything but their claims: the pid watch, the
worktree, the host; and every process attached to the agent follows the renewal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

from .conftest import LOCKSTEP, cli, end_process, env_for, holders, status, wait_until

# Stale after 0.6 s of silence; a stale holder's paths wait 60 s: only a pid watch frees
# them sooner.
PAUSABLE = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "60")

# The command run as the agent: each line on stdin is a path it claims through the CLI
# (which attaches to the agent's live session by name, as an editor hook would).
CLAIMER = (
    "import subprocess, sys\n"
    "for line in sys.stdin:\n"
    "    subprocess.run([sys.executable, '-m', 'agents.cli', 'claim', line.strip()])\n"
)


def sessions_of(repo, name: str) -> list[dict]:
    return [a for a in status(repo)["agents"] if a["name"] == name]


def live_session(repo, name: str) -> dict | None:
    return next((a for a in sessions_of(repo, name) if a["state"] == "alive"), None)


def session_info(repo, session: str) -> dict | None:
    return next((a for a in status(repo)["agents"] if a["session"] == session), None)


class RunAgent:
    """``lockstep run --agent NAME -- CLAIMER`` in its own process group (a terminal's
    job: SIGSTOP, SIGCONT and SIGKILL reach the wrapper and its command together)."""

    def __init__(self, repo, name: str) -> None:
        self.proc = subprocess.Popen(
            [*LOCKSTEP, "run", "--agent", name, "--", sys.executable, "-c", CLAIMER],
            cwd=repo.root,
            env=env_for(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.stderr: list[str] = []
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def said(self, text: str) -> int:
        """How many lines of its stderr contain ``text``."""
        return sum(text in line for line in list(self.stderr))

    def claim(self, path: str) -> None:
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()

    def signal_group(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def end(self) -> None:
        if self.proc.poll() is None:
            try:
                self.signal_group(signal.SIGCONT)
                self.signal_group(signal.SIGKILL)
            except ProcessLookupError:
                pass
        end_process(self.proc)


def test_a_run_agent_renewed_after_a_pause_keeps_its_pid_watch_and_dies_freeing_at_once(repo, coordinator):
    coordinator(*PAUSABLE)
    carol = RunAgent(repo, "carol")
    try:
        carol.claim("src/")
        wait_until(lambda: holders(repo).get("src/") == "carol", timeout=20, what="carol's claim")
        first = live_session(repo, "carol")
        child = first["pid"]
        assert child is not None and child != carol.proc.pid  # the command's pid, watched

        carol.signal_group(signal.SIGSTOP)
        try:
            wait_until(
                lambda: (session_info(repo, first["session"]) or {}).get("state") == "stale",
                timeout=15,
                what="carol's paused session to go stale",
            )
        finally:
            carol.signal_group(signal.SIGCONT)
        renewed = wait_until(
            lambda: (a := live_session(repo, "carol")) and a["session"] != first["session"] and a,
            timeout=15,
            what="carol's wrapper to open a new session",
        )
        # Everything but the claims: the same watched pid, worktree and kind.
        assert renewed["pid"] == child
        assert renewed["worktree"] == first["worktree"] and renewed["kind"] == "run"

        carol.claim("docs/")
        wait_until(lambda: holders(repo).get("docs/") == "carol", timeout=20, what="carol's claim in the new session")
        carol.signal_group(signal.SIGKILL)
        ended = wait_until(
            lambda: (a := session_info(repo, renewed["session"])) and a["state"] != "alive" and a,
            timeout=15,
            what="carol's renewed session to end",
        )
        assert ended["state"] == "gone"
        assert f"process {child} exited" in ended["reason"]
        # Free at once (the lock delay is 60 s): bob gets docs/ now.
        granted = cli("claim", "--agent", "bob", "docs/readme.md", "--json", cwd=repo.other)
        assert granted.rc == 0, granted
    finally:
        carol.end()


def pause_until_stale(repo, agent: RunAgent, session: str) -> None:
    """SIGSTOP the agent's group until its session is stale (the caller resumes it)."""
    agent.signal_group(signal.SIGSTOP)
    wait_until(
        lambda: (session_info(repo, session) or {}).get("state") == "stale",
        timeout=15,
        what=f"session {session} to go stale",
    )


def test_an_attached_long_lived_client_follows_the_renewal(repo, coordinator, agents):
    coordinator(*PAUSABLE)
    carol = RunAgent(repo, "carol")
    try:
        first = wait_until(lambda: (s := live_session(repo, "carol")) and s["pid"] and s, timeout=20, what="carol's watched session")
        # A second process acting as carol (an agent framework holding the client
        # library's connection): it attaches to the wrapper's session.
        attached = agents("carol", repo.root, kind="oneshot")
        assert attached.session == first["session"]
        assert attached.do("claim", paths=["src/app.py"])["type"] == "granted"

        try:
            pause_until_stale(repo, carol, first["session"])
        finally:
            carol.signal_group(signal.SIGCONT)
        renewed = wait_until(
            lambda: (a := live_session(repo, "carol")) and a["session"] != first["session"] and a,
            timeout=15,
            what="carol's wrapper to renew",
        )
        # The attached client's next calls act in the renewed session, call after call.
        for path in ("docs/", "lib/", "tests/"):
            reply = attached.do("claim", paths=[path])
            assert reply.get("type") == "granted", reply
            assert reply["session"] == renewed["session"]
        assert any(renewed["session"] in n for n in attached.notices)
        assert [a["session"] for a in sessions_of(repo, "carol") if a["state"] == "alive"] == [renewed["session"]]
    finally:
        carol.end()


class McpServer:
    """``lockstep mcp --agent NAME``: JSON-RPC lines in and out, every read with a deadline."""

    def __init__(self, repo, name: str) -> None:
        import queue
        import threading

        self.proc = subprocess.Popen(
            [*LOCKSTEP, "mcp", "--agent", name],
            cwd=repo.root,
            env=env_for(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ids = iter(range(1, 1_000_000))
        init = self.request("initialize", {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}})
        assert "result" in init, init
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self) -> None:
        import json

        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, message: dict) -> None:
        import json

        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict, timeout: float = 20) -> dict:
        import queue

        ident = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        while True:
            try:
                reply = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"the MCP server said nothing for {timeout}s") from None
            assert reply is not None, f"the MCP server exited: {self.proc.stderr.read()}"
            if reply.get("id") == ident:
                return reply

    def tool(self, name: str, **arguments) -> tuple[dict, bool]:
        import json

        result = self.request("tools/call", {"name": name, "arguments": arguments})["result"]
        return json.loads(result["content"][0]["text"]), result.get("isError", False)

    def end(self) -> None:
        end_process(self.proc)


def test_the_mcp_server_keeps_working_across_a_renewal_and_the_wrapper_takes_over(repo, coordinator):
    coordinator(*PAUSABLE)
    carol = RunAgent(repo, "carol")
    mcp = None
    try:
        first = wait_until(lambda: (s := live_session(repo, "carol")) and s["pid"] and s, timeout=20, what="carol's watched session")
        mcp = McpServer(repo, "carol")
        payload, failed = mcp.tool("claim", paths=["src/app.py"])
        assert not failed, payload

        try:
            pause_until_stale(repo, carol, first["session"])
            # The model keeps working while its wrapper is away: the call opens a
            # one-shot session for carol.
            payload, failed = mcp.tool("claim", paths=["docs/"])
            assert not failed, payload
        finally:
            carol.signal_group(signal.SIGCONT)
        # The wrapper comes back and takes that session over, claims and all, watching
        # its command's pid again.
        adopted = wait_until(
            lambda: (a := live_session(repo, "carol")) and a["kind"] == "run" and a["session"] != first["session"] and a,
            timeout=15,
            what="carol's wrapper to take over the one-shot session",
        )
        assert adopted["pid"] == first["pid"]
        assert holders(repo).get("docs/") == "carol"
        payload, failed = mcp.tool("claim", paths=["lib/"])
        assert not failed, payload
        assert [a["session"] for a in sessions_of(repo, "carol") if a["state"] == "alive"] == [adopted["session"]]

        carol.signal_group(signal.SIGKILL)
        ended = wait_until(
            lambda: (a := session_info(repo, adopted["session"])) and a["state"] != "alive" and a,
            timeout=15,
            what="carol's session to end with its process",
        )
        assert ended["state"] == "gone" and "exited" in ended["reason"]
        assert cli("claim", "--agent", "bob", "docs/readme.md", "lib/x.py", cwd=repo.other).rc == 0
    finally:
        carol.end()
        if mcp is not None:
            mcp.end()


# Coordinator <-> client heartbeats: the coordinator is unreachable after 1 s of silence.
LISTENING = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "60")


def test_run_says_once_that_a_killed_coordinator_is_unreachable_and_registers_again_when_it_returns(repo, coordinator):
    first = coordinator(*LISTENING)
    carol = RunAgent(repo, "carol")
    try:
        before = wait_until(lambda: (s := live_session(repo, "carol")) and s["pid"] and s, timeout=20, what="carol's watched session")
        first.kill()  # SIGKILL: no goodbye; carol makes no request of her own
        wait_until(lambda: carol.said("coordinator unreachable"), timeout=20, what="run to say the coordinator is unreachable")
        coordinator(*LISTENING)
        wait_until(lambda: carol.said("coordinator reachable again"), timeout=20, what="run to register again")
        assert carol.said("coordinator unreachable") == 1  # once per outage, not once per heartbeat
        after = live_session(repo, "carol")
        assert after is not None and after["pid"] == before["pid"]  # the session and its pid watch are back
        carol.claim("docs/")
        wait_until(lambda: holders(repo).get("docs/") == "carol", timeout=20, what="carol's claim after the restart")
        carol.signal_group(signal.SIGKILL)
        ended = wait_until(
            lambda: (a := session_info(repo, after["session"])) and a["state"] != "alive" and a,
            timeout=15,
            what="carol's session to end with her process",
        )
        assert ended["state"] == "gone" and "exited" in ended["reason"]
    finally:
        carol.end()


def test_run_says_once_that_a_stopped_coordinator_is_unreachable_and_resumes_when_it_continues(repo, coordinator):
    coord = coordinator(*LISTENING)
    carol = RunAgent(repo, "carol")
    try:
        before = wait_until(lambda: (s := live_session(repo, "carol")) and s["pid"] and s, timeout=20, what="carol's watched session")
        os.kill(coord.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: carol.said("coordinator unreachable"), timeout=20, what="run to say the coordinator is unreachable")
        finally:
            os.kill(coord.pid, signal.SIGCONT)
        wait_until(lambda: carol.said("coordinator reachable again"), timeout=20, what="run to hear the coordinator again")
        assert carol.said("coordinator unreachable") == 1
        # The coordinator knew it was the one paused: the same session lives on.
        after = live_session(repo, "carol")
        assert after["session"] == before["session"] and after["pid"] == before["pid"]
        assert carol.said(f"session {before['session']} resumed")
    finally:
        carol.end()


def test_the_client_library_learns_the_coordinator_is_gone_without_making_a_request(repo, coordinator, agents):
    first = coordinator(*LISTENING)
    alice = agents("alice", repo.root)
    first.kill()
    said = alice.lines.get(timeout=20)  # the next thing it says, unasked
    assert said["event"] == "notice" and "coordinator unreachable" in said["text"], said
    assert "1s" in said["text"]  # heartbeat 0.2 s x liveness 5
