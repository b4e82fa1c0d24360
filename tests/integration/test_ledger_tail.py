"""`lockstep ledger tail`: filters (--agent, --kind glob, --since), --follow like tail -f,
JSON lines, and a negative count refused as bad input."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading

from .conftest import LOCKSTEP, cli, end_process, env_for

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _lines(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_follow_prints_new_matching_events_as_json_lines(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    follow = subprocess.Popen(
        [*LOCKSTEP, "ledger", "tail", "--follow", "--agent", "alice", "--kind", "claim.*", "--json"],
        cwd=repo.other, env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        lines = _lines(follow)
        first = json.loads(lines.get(timeout=20))
        assert (first["kind"], first["agent"]) == ("claim.granted", "alice")  # already in the ledger
        assert cli("claim", "--agent", "bob", "src/b.py", cwd=repo.root).rc == 0  # another agent: not shown
        assert cli("intent", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0  # another kind: not shown
        assert cli("release", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
        released = json.loads(lines.get(timeout=20))
        assert (released["kind"], released["agent"]) == ("claim.released", "alice") and released["id"] > first["id"]
        assert lines.empty()
        follow.send_signal(signal.SIGINT)
        # generous: on a loaded machine the interrupt may land in a read that first waits out
        # the ledger's busy timeout (5 s)
        assert follow.wait(30) == 0, follow.stderr.read()
    finally:
        end_process(follow)


def test_filters_and_bad_counts(repo, coordinator):
    coordinator(*FAST)
    for agent in ("alice", "bob"):
        assert cli("claim", "--agent", agent, f"src/{agent}.py", cwd=repo.root).rc == 0
    text = cli("ledger", "tail", "--kind", "claim.granted", cwd=repo.root)
    assert text.rc == 0 and len(text.out.splitlines()) == 2 and "alice" in text.out and "bob" in text.out
    one = cli("ledger", "tail", "-n", "1", "--kind", "claim.*", "--json", cwd=repo.root)
    assert [json.loads(line)["agent"] for line in one.out.splitlines()] == ["bob"]  # the newest matching
    later = cli("ledger", "tail", "--since", "2999-01-01T00:00", cwd=repo.root)
    assert later.rc == 0 and later.out == ""
    bobs = cli("ledger", "tail", "--since", "1h", "--agent", "bob", cwd=repo.root).out.splitlines()
    assert [line.split()[3] for line in bobs] == ["agent.joined", "claim.granted"]
    negative = cli("ledger", "tail", "-n", "-5", cwd=repo.root)  # item 9: printed nothing, exit 0
    assert negative.rc == 2 and "-5" in negative.err
    bad = cli("ledger", "tail", "--since", "soon", cwd=repo.root)
    assert bad.rc == 2 and "--since" in bad.err
