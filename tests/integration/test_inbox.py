"""Tasks and messages reach agents: a rule's ``queue_task`` makes a task an agent sees and
takes; messages go to an agent's model through its hooks, once; all of it is in the
ledger and survives a restart and a compaction.  A real coordinator, a real git
repository, a real local http service that fails, the clients' own hook payloads."""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .conftest import LOCKSTEP, cli, env_for
from .test_turns import CLAUDE_AGENT, _answer, _fixture, _hook, _ledger

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


class _Failing(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server API
        self.send_response(503)
        self.end_headers()
        self.wfile.write(b"down for maintenance")

    def log_message(self, *args):
        pass


def _serve_failing():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _context(answer: dict) -> str:
    return (answer.get("hookSpecificOutput") or {}).get("additionalContext", "")


def test_a_queued_task_and_messages_reach_the_agent_once_through_its_hooks(repo, coordinator):
    (repo.root / "lockstep.toml").write_text(
        '[[rule]]\nfinding = "endpoint failing"\nresponse = "queue_task"\n'
        f'task = "bring the api back up"\nagent = "{CLAUDE_AGENT}"\n'
    )
    server = _serve_failing()
    try:
        coordinator(*FAST)
        url = f"http://127.0.0.1:{server.server_port}/health"
        checked = cli("check", "http", url, "--name", "api", "--json", cwd=repo.root)
        assert checked.rc == 1 and checked.json["responses"][0]["action"] == "queue_task", checked
        listed = cli("tasks", "--json", cwd=repo.root).json["tasks"]
        assert [(t["id"], t["agent"], t["state"], t["because"], t["queued_by"]) for t in listed] == [
            (1, CLAUDE_AGENT, "queued", "endpoint failing", "rule")
        ]
        sent = cli("send", "--to", CLAUDE_AGENT, "leave", "src/api", "to", "bob", "--json", cwd=repo.root)
        assert sent.rc == 0 and sent.json["to"] == CLAUDE_AGENT, sent

        # the next prompt's hook puts both in the model's context; the one after, nothing
        first = _answer(_hook("claude", _fixture("claude", "user_prompt_submit.json", repo.root), repo.root))
        assert first["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
        context = _context(first)
        assert "message 1 from the operator: leave src/api to bob" in context
        assert "task 1 for you: bring the api back up (because: endpoint failing)" in context
        assert "lockstep tasks take 1" in context
        assert _answer(_hook("claude", _fixture("claude", "user_prompt_submit.json", repo.root), repo.root)) == {}

        # mid-turn: a message from another agent comes with the answer to the next write
        assert cli("send", "--to", CLAUDE_AGENT, "--agent", "bob", "rebase on main first", cwd=repo.other).rc == 0
        edit = _answer(_hook("claude", _fixture("claude", "pre_tool_use_edit.json", repo.root), repo.root))
        assert "permissionDecision" not in json.dumps(edit)  # allowed
        assert "message 2 from bob: rebase on main first" in _context(edit)
        again = _hook("claude", _fixture("claude", "pre_tool_use_edit.json", repo.root), repo.root)
        assert again.returncode == 0 and "rebase" not in again.stdout

        # take and finish: the first taker owns it
        assert cli("tasks", "take", "1", "--agent", "bob", cwd=repo.other).rc == 0
        refused = cli("tasks", "take", "1", "--agent", CLAUDE_AGENT, "--json", cwd=repo.root)
        assert refused.rc == 1 and refused.json["error"]["code"] == "refused" and "bob" in refused.json["error"]["message"]
        assert cli("tasks", "done", "1", "--agent", CLAUDE_AGENT, cwd=repo.root).rc == 1
        assert cli("tasks", "take", "9", "--agent", "bob", "--json", cwd=repo.other).json["error"]["code"] == "not_found"
        assert cli("tasks", "take", "x", "--agent", "bob", cwd=repo.other).rc == 2
        assert cli("send", "--to", "not a name", "hi", cwd=repo.root).rc == 2
        assert cli("send", "--to", "bob", " ", cwd=repo.root).rc == 2
        finished = cli("tasks", "done", "1", "--agent", "bob", "--json", cwd=repo.other)
        assert finished.rc == 0 and finished.json["tasks"][0]["state"] == "done", finished
        assert cli("tasks", "--json", cwd=repo.root).json["tasks"] == []

        # the MCP tools: send, then the other agent's inbox
        calls = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "send", "arguments": {"to": CLAUDE_AGENT, "text": "ship it"}}},
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "tasks", "arguments": {"all": True}}},
        ]
        answers = subprocess.run([*LOCKSTEP, "mcp", "--agent", "bob"], input="".join(json.dumps(c) + "\n" for c in calls),
                                 cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
        results = [json.loads(line)["result"] for line in answers.stdout.splitlines()[1:]]
        assert not results[0]["isError"] and results[1]["structuredContent"]["tasks"][0]["state"] == "done"
        inbox = cli("inbox", "--agent", CLAUDE_AGENT, "--json", cwd=repo.root).json
        assert [(x["sender"], x["text"], x["delivered"]) for x in inbox["messages"]] == [("bob", "ship it", False)]

        kinds = ("task.queued", "task.taken", "task.done", "message.sent", "inbox.delivered")
        assert [len(_ledger(repo, kind)) for kind in kinds] == [1, 1, 1, 3, 3]
        delivered = _ledger(repo, "inbox.delivered")
        assert [(e["data"]["messages"], e["data"]["tasks"], e["data"]["via"]) for e in delivered] == [
            ([1], [1], "UserPromptSubmit"), ([2], [], "PreToolUse"), ([3], [], "inbox")
        ]
    finally:
        server.shutdown()
        server.server_close()


def test_tasks_and_inboxes_are_the_same_after_a_restart_and_a_compaction(repo, coordinator):
    first = coordinator(*FAST)
    assert cli("tasks", "add", "write", "the", "release", "notes", "--to", "alice", cwd=repo.root).rc == 0
    assert cli("tasks", "add", "anyone: fix the flaky test", cwd=repo.root).rc == 0
    assert cli("tasks", "take", "2", "--agent", "bob", cwd=repo.other).rc == 0
    assert cli("send", "--to", "alice", "the release is friday", cwd=repo.root).rc == 0
    assert cli("send", "--to", "alice", "and the notes go in docs/", cwd=repo.root).rc == 0
    shown = cli("inbox", "--agent", "alice", "--json", cwd=repo.root).json
    assert [x["id"] for x in shown["messages"]] == [1, 2] and [t["id"] for t in shown["tasks"]] == [1]
    before = cli("tasks", "--all", "--json", cwd=repo.root).json["tasks"]
    for restart in ("restart", "compact"):
        if restart == "compact":
            assert cli("ledger", "compact", "--keep", "0", cwd=repo.root).rc == 0
        first.stop()
        first = coordinator(*FAST)
        assert cli("tasks", "--all", "--json", cwd=repo.root).json["tasks"] == before, restart
        again = cli("inbox", "--agent", "alice", "--json", cwd=repo.root).json
        assert again["messages"] == [] and again["tasks"] == [], restart  # shown once, even across restarts
        every = cli("inbox", "--agent", "alice", "--all", "--json", cwd=repo.root).json
        assert [(x["id"], x["delivered"]) for x in every["messages"]] == [(1, True), (2, True)], restart
    # numbering goes on where it stood
    assert "task 3" in cli("tasks", "add", "one more", cwd=repo.root).out
    assert "message 3" in cli("send", "--to", "alice", "hello again", cwd=repo.root).out
