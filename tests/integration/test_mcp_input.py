"""Hostile and odd input to ``lockstep mcp``, as a real process over real pipes with a
real coordinator: each gets its JSON-RPC error (or its one-line message and exit 2 on
the command line), memory stays bounded, and the server answers the next line."""

from __future__ import annotations

import json
import queue
import subprocess
import threading

from .conftest import LOCKSTEP, PROJECT, end_process, env_for, holders

FAST = ("--heartbeat", "0.2", "--liveness", "5")
PING = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"})
MiB = 1024 * 1024


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class McpProcess:
    """``lockstep mcp`` with its stdout read line by line on a thread (waits have deadlines)."""

    def __init__(self, cwd, *args: str, env: dict | None = None) -> None:
        self.proc = subprocess.Popen([*LOCKSTEP, "mcp", *args], cwd=cwd, env=env_for(env), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def reply(self, timeout: float = 60) -> dict:
        try:
            item = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no reply in {timeout}s") from None
        assert item is not None, f"the server ended: {self.proc.stderr.read().decode()}"
        return item

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def end(self) -> tuple[int, str]:
        self.proc.stdin.close()
        self.proc.wait(30)
        return self.proc.returncode, self.proc.stderr.read().decode()


def _call(ident, name: str, arguments: dict) -> bytes:
    message = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return json.dumps(message).encode() + b"\n"


def test_a_line_without_end_is_refused_in_bounded_memory_and_the_next_line_is_served(repo, coordinator):
    """One line of 256 MiB was read whole before anything looked at it (a line that
    never ends grew the server without bound): now the server holds at most its cap,
    answers -32600 once the line ends, and serves the next lines."""
    coordinator(*FAST)
    server = McpProcess(repo.root, "--agent", "mcpbot")
    try:
        server.send(PING.encode() + b"\n")
        assert server.reply() == {"jsonrpc": "2.0", "id": 7, "result": {}}
        before = _peak_rss(server.proc.pid)
        chunk = b"x" * MiB
        for _ in range(256):
            server.send(chunk)
        server.send(b"\n" + PING.encode() + b"\n" + _call(8, "claim", {"paths": ["src/app.py"]}))
        refused, pong, claimed = server.reply(), server.reply(), server.reply()
        grown = _peak_rss(server.proc.pid) - before
        assert refused["id"] is None and refused["error"]["code"] == -32600
        assert "longer than" in refused["error"]["message"]
        assert pong == {"jsonrpc": "2.0", "id": 7, "result": {}}
        assert claimed["id"] == 8 and not claimed["result"]["isError"]
        assert holders(repo) == {"src/app.py": "mcpbot"}
        assert grown < 64 * MiB, f"the server grew by {grown // MiB} MiB reading one 256 MiB line"
        rc, err = server.end()
        assert rc == 0 and "Traceback" not in err, err
    finally:
        end_process(server.proc)


def test_an_invalid_agent_name_exits_2_with_one_line_before_serving(repo):
    """``lockstep mcp --agent "a b"`` started and answered every tool call with the same
    refusal; now it is bad input on the command line, as for every other verb."""
    for args, env in ((["--agent", "a b"], None), ([], {"LOCKSTEP_AGENT": "-x"}), (["--agent", "a" * 65], None)):
        done = subprocess.run([*LOCKSTEP, "mcp", *args], input=PING + "\n", cwd=repo.root, env=env_for(env),
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and done.stdout == "", (args, done)
        assert len(done.stderr.splitlines()) == 1 and "invalid agent name" in done.stderr, done.stderr


def test_a_tool_call_whose_folder_was_removed_is_a_tool_error_and_the_server_goes_on(repo, coordinator):
    """The folder the server runs in is removed under it: ``verify`` met a
    FileNotFoundError, printed a traceback and ended the server (every later call went
    to a closed pipe).  Now that call is a tool error saying so, and the server answers
    the next calls (a failure no tool expects is the request's -32603: tests/unit)."""
    coordinator(*FAST)
    folder = repo.root / "scratch"
    folder.mkdir()
    server = McpProcess(folder, "--agent", "mcpbot")
    try:
        server.send(PING.encode() + b"\n")
        assert server.reply()["id"] == 7
        folder.rmdir()
        server.send(_call(1, "verify", {}) + PING.encode() + b"\n")
        failed, pong = server.reply(), server.reply()
        error = failed["result"]["structuredContent"]["error"]
        assert failed["id"] == 1 and failed["result"]["isError"] and error["exit_code"] == 2
        assert error["message"] == "the current directory no longer exists (removed?): cd into a worktree of the repository"
        assert pong == {"jsonrpc": "2.0", "id": 7, "result": {}}
        rc, err = server.end()
        assert rc == 0 and err == "", err
    finally:
        end_process(server.proc)
    # started in a folder already removed: a traceback before, now exit 2 and one line
    script = 'mkdir gone && cd gone && rmdir ../gone && exec "$@"'
    env = {**env_for(), "PYTHONPATH": str(PROJECT)}  # no empty entry: Python itself cannot start on a removed "."
    started = subprocess.run(["sh", "-c", script, "sh", *LOCKSTEP, "mcp", "--agent", "mcpbot"], input=PING + "\n", cwd=repo.root,
                             env=env, capture_output=True, text=True, timeout=30)
    assert started.returncode == 2 and started.stdout == "", started
    assert started.stderr == "lockstep: the current directory no longer exists (removed?): cd into a worktree of the repository\n"


def test_a_claim_with_braces_is_refused_as_on_the_command_line(repo, coordinator):
    """``src/{a,b}.py`` through MCP was claimed as one file of that name (the model
    believed it held src/a.py and src/b.py; anyone could write them); the CLI refuses it.
    Now the tool does too, naming the paths to claim; "literal": true claims the name."""
    coordinator(*FAST)
    server = McpProcess(repo.root, "--agent", "mcpbot")
    try:
        server.send(_call(1, "claim", {"paths": ["src/{a,b}.py"]}) + _call(2, "release", {"paths": ["src/{a,b}.py"]}))
        for ident in (1, 2):
            refused = server.reply()["result"]
            error = refused["structuredContent"]["error"]
            assert refused["isError"] and error["code"] == "bad_path" and error["exit_code"] == 2
            assert "src/a.py src/b.py" in error["message"] and '"literal": true' in error["message"]
        assert holders(repo) == {}
        server.send(_call(3, "claim", {"paths": ["src/{a,b}.py"], "literal": True}))
        assert not server.reply()["result"]["isError"]
        assert holders(repo) == {"src/{a,b}.py": "mcpbot"}
        assert server.end()[0] == 0
    finally:
        end_process(server.proc)


def test_paths_past_the_wire_cap_are_refused_before_each_is_resolved(repo, coordinator):
    """A line of 110 000 paths (under 1 MiB) was resolved path by path (~24 s on 2 cores, the
    server answering nothing meanwhile) before the coordinator refused the message as
    too large.  Now the call is refused at once, naming the size; repeats count once."""
    coordinator(*FAST)
    server = McpProcess(repo.root, "--agent", "mcpbot")
    try:
        server.send(_call(1, "claim", {"paths": [f"d{i}/f.py" for i in range(40_000)]}) + _call(2, "claim", {"paths": ["src/app.py"] * 40_000}))
        refused, repeated = server.reply()["result"], server.reply()["result"]
        error = refused["structuredContent"]["error"]
        assert refused["isError"] and error["code"] == "too_large" and error["exit_code"] == 2
        assert "the paths are " in error["message"] and "bytes; at most 262144 in one call" in error["message"]
        assert not repeated["isError"] and repeated["structuredContent"]["patterns"] == ["src/app.py"]
        assert holders(repo) == {"src/app.py": "mcpbot"}
        assert server.end()[0] == 0
    finally:
        end_process(server.proc)


def test_a_branch_name_with_a_nul_byte_is_a_tool_error_naming_it(repo, coordinator):
    """``land`` with a branch holding a NUL byte raised ValueError from the git call (the
    request's -32603: an internal error); it is the caller's bad input, said as such."""
    coordinator(*FAST)
    server = McpProcess(repo.other, "--agent", "mcpbot")
    try:
        server.send(_call(1, "land", {"branch": "wt-bob\0x"}) + _call(2, "land", {"branch": "a\nb"}))
        for _ in range(2):
            refused = server.reply()["result"]
            error = refused["structuredContent"]["error"]
            assert refused["isError"] and error["code"] == "usage" and error["exit_code"] == 2
            assert "a branch name has no control characters" in error["message"]
        assert server.end() == (0, "")
    finally:
        end_process(server.proc)


def test_a_link_claimed_through_mcp_names_the_link_and_what_it_points_to(repo, coordinator):
    # as `lockstep claim LINK` (agents.paths): the link itself, which the hooks ask for
    # when a call replaces it, and the file it points to
    coordinator(*FAST)
    (repo.root / "link").symlink_to("src/app.py")
    server = McpProcess(repo.root, "--agent", "mcpbot")
    try:
        server.send(_call(1, "claim", {"paths": ["link"]}))
        claimed = server.reply()
        assert claimed["id"] == 1 and not claimed["result"]["isError"], claimed
        assert holders(repo) == {"src/app.py": "mcpbot", "link": "mcpbot"}
        server.send(_call(2, "release", {"paths": ["link"]}))
        assert not server.reply()["result"]["isError"]
        assert holders(repo) == {}
        rc, err = server.end()
        assert rc == 0 and "Traceback" not in err, err
    finally:
        end_process(server.proc)
