"""`lockstep run` watches its worktree: every write its command makes is reported as it
happens (no hooks involved), a conflict is on record and published within a deadline,
and a free file is claimed for the writer."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

import pytest
import zmq

from protocol.codec import decode_publication

from .conftest import LOCKSTEP, cli, end_process, env_for, holders, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _run(repo_dir, name: str, script: str) -> subprocess.Popen:
    """``lockstep run --agent NAME -- sh -c SCRIPT`` with a pipe to the script's stdin."""
    return subprocess.Popen(
        [*LOCKSTEP, "run", "--agent", name, "--", "sh", "-c", script],
        cwd=repo_dir, env=env_for(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _intents(repo, agent: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "200", "--agent", agent, "--kind", "intent.decided", "--json", cwd=repo.root).out
    return [json.loads(line)["data"] for line in out.splitlines()]


def _said(proc: subprocess.Popen, line: str) -> None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def test_a_write_to_a_held_file_is_published_and_a_free_one_claimed(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    (repo.other / ".gitignore").write_text("build/\n")
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(status(repo)["pub"][0])
    # the script writes when told: an ignored file and a free one, then the held one
    bob = _run(repo.other, "bob", "read go; mkdir -p build docs; echo o > build/out.o; echo n > docs/notes.md; "
                                  "read go; echo x >> src/app.py; read end")
    try:
        wait_until(lambda: "bob" in {a["name"] for a in status(repo)["agents"] if a["state"] == "alive"}, timeout=20, what="bob's session")
        while sub.poll(0):  # what the join published; a SUB joins asynchronously, so we also read the ledger below
            sub.recv_multipart()
        _said(bob, "go")
        # docs/ is new: notes.md is written before the watcher can watch the folder
        wait_until(lambda: holders(repo).get("docs/notes.md") == "bob", timeout=10, what="the free file claimed for bob")
        assert "build/out.o" not in holders(repo) and not any("build/out.o" in d["paths"] for d in _intents(repo, "bob"))

        written = time.monotonic()
        _said(bob, "go")
        blocked = wait_until(lambda: [d for d in _intents(repo, "bob") if d["verdict"] == "block"], timeout=10,
                             what="the conflicting write on record")
        assert blocked[0]["paths"] == ["src/app.py"] and blocked[0]["holders"] == ["alice"]
        publication = _next_publication(sub, "intent.decided", deadline=written + 10)
        assert publication.agent == "bob" and publication.data["holders"] == ["alice"]
        assert holders(repo)["src/app.py"] == "alice"  # reported, not taken
        _said(bob, "end")
        assert bob.wait(20) == 0
    finally:
        end_process(bob)
        sub.close()
        ctx.term()


def _next_publication(sub, kind: str, deadline: float):
    while time.monotonic() < deadline:
        if sub.poll(100):
            publication = decode_publication(sub.recv_multipart()[1])
            if publication.kind == kind and publication.data.get("verdict") == "block":
                return publication
    raise AssertionError(f"no {kind} publication before the deadline")


def test_writes_made_just_before_the_command_exits_are_reported(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    proc = subprocess.run([*LOCKSTEP, "run", "--agent", "bob", "--", "sh", "-c", "echo x >> src/app.py"],
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "alice" in proc.stderr and "src/app.py" in proc.stderr  # the run says it wrote a held file
    assert "expired" not in proc.stderr  # the session ended with the command: renewing it to report is no news
    blocked = [d for d in _intents(repo, "bob") if d["verdict"] == "block"]
    assert blocked and blocked[0]["paths"] == ["src/app.py"] and blocked[0]["holders"] == ["alice"]


def test_a_worktree_shared_with_another_live_agent_is_not_reported(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "docs/", "--agent", "carol", cwd=repo.other).rc == 0  # carol works in bob's worktree
    proc = subprocess.run([*LOCKSTEP, "run", "--agent", "bob", "--", "sh", "-c", "echo x > notes.md"],
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "carol" in proc.stderr and "not reported" in proc.stderr
    assert _intents(repo, "bob") == []


def test_no_watch_reports_nothing(repo, coordinator):
    coordinator(*FAST)
    proc = subprocess.run([*LOCKSTEP, "run", "--agent", "bob", "--no-watch", "--", "sh", "-c", "echo x > notes.md"],
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and (repo.other / "notes.md").exists()
    assert _intents(repo, "bob") == []


def test_ignored_files_and_scratch_are_skipped_until_the_gitignore_changes(repo, coordinator):
    coordinator(*FAST)
    (repo.other / ".gitignore").write_text("*.o\n")
    bob = _run(repo.other, "bob", "read go; echo a > a.o; mkdir __pycache__; echo c > __pycache__/m.pyc; echo s > .notes.md.swp; "
                                  "echo n > notes.md; read go; : > .gitignore; echo b > a.o; read end")
    try:
        wait_until(lambda: "bob" in {a["name"] for a in status(repo)["agents"] if a["state"] == "alive"}, timeout=20, what="bob's session")
        _said(bob, "go")
        wait_until(lambda: holders(repo).get("notes.md") == "bob", timeout=10, what="notes.md claimed for bob")
        assert "a.o" not in holders(repo)  # ignored (and remembered as ignored)
        assert {"__pycache__/m.pyc", ".notes.md.swp"}.isdisjoint(holders(repo))  # scratch, though no .gitignore says so
        _said(bob, "go")  # the .gitignore no longer ignores *.o: the verdict is asked again
        wait_until(lambda: holders(repo).get("a.o") == "bob", timeout=10, what="a.o claimed once no longer ignored")
        _said(bob, "end")
        assert bob.wait(20) == 0
    finally:
        end_process(bob)


def test_names_that_cannot_be_reported_are_said_and_the_watch_goes_on(repo, coordinator):
    coordinator(*FAST)
    bob = _run(repo.other, "bob", "read go; echo x > \"$(printf 'bad\\377')\"; read go; echo x > 'back\\slash'; echo n > notes.md; read end")
    err: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [err.put(line) for line in bob.stderr], daemon=True).start()

    def said(words: str) -> str:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                line = err.get(timeout=0.2)
            except queue.Empty:
                continue
            if words in line:
                return line
        raise AssertionError(f"run never said {words!r}")

    try:
        wait_until(lambda: "bob" in {a["name"] for a in status(repo)["agents"] if a["state"] == "alive"}, timeout=20, what="bob's session")
        _said(bob, "go")  # a name that is not UTF-8: the watcher cannot read it, says so and watches again
        assert "bad" in said("watching again")
        _said(bob, "go")
        assert "back" in said("backslash")  # a name the coordinator refuses: said, skipped
        wait_until(lambda: holders(repo).get("notes.md") == "bob", timeout=10, what="notes.md claimed after the odd names")
        _said(bob, "end")
        assert bob.wait(20) == 0
    finally:
        end_process(bob)


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "200", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def _next_kind(sub, kind: str, deadline: float):
    while time.monotonic() < deadline:
        if sub.poll(100):
            publication = decode_publication(sub.recv_multipart()[1])
            if publication.kind == kind:
                return publication
    raise AssertionError(f"no {kind} publication before the deadline")


@pytest.mark.parametrize("mode", ["parallel-strict", "parallel-warn"])
def test_a_run_child_writing_a_held_file_without_hooks_is_an_unannounced_write(repo, coordinator, mode):
    """The watcher reports what it saw as writes after the fact: the held file is a
    ``write.unannounced`` on record and published within a deadline; the free file
    written in the same burst is claimed for the writer, in either mode."""
    coordinator(*FAST, "--mode", mode)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(status(repo)["pub"][0])
    # no hooks anywhere: a plain shell child writes the held file and a free one at once
    bob = _run(repo.other, "bob", "read go; echo x >> src/app.py; echo n > src/new.py; read end")
    try:
        wait_until(lambda: "bob" in {a["name"] for a in status(repo)["agents"] if a["state"] == "alive"}, timeout=20, what="bob's session")
        while sub.poll(0):
            sub.recv_multipart()
        written = time.monotonic()
        _said(bob, "go")
        publication = _next_kind(sub, "write.unannounced", deadline=written + 10)
        assert publication.agent == "bob" and publication.data["paths"] == ["src/app.py"]
        assert publication.data["holders"] == ["alice"] and publication.data["source"] == "run watcher"
        recorded = wait_until(lambda: _ledger(repo, "write.unannounced"), timeout=10, what="the unannounced write on record")
        assert [(e["agent"], e["data"]["paths"], e["data"]["holders"]) for e in recorded] == [("bob", ["src/app.py"], ["alice"])]
        wait_until(lambda: holders(repo).get("src/new.py") == "bob", timeout=10, what="the free file claimed for bob")
        assert holders(repo)["src/app.py"] == "alice"  # reported, not taken
        _said(bob, "end")
        assert bob.wait(20) == 0
        said = bob.stderr.read()
        assert "wrote src/app.py, which alice holds" in said and "src/new.py" not in said
    finally:
        end_process(bob)
        sub.close()
        ctx.term()


def test_a_rewrite_with_the_committed_bytes_or_a_revert_is_no_write(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    # the same bytes as committed (a formatter that changed nothing), then a marker
    bob = _run(repo.other, "bob", "read go; printf \"print('hi')\\n\" > src/app.py; echo 1 > one.md; "
                                  "read go; echo x >> src/app.py; read go; git checkout -- src/app.py; echo 2 > two.md; read end")
    try:
        wait_until(lambda: "bob" in {a["name"] for a in status(repo)["agents"] if a["state"] == "alive"}, timeout=20, what="bob's session")
        _said(bob, "go")
        wait_until(lambda: holders(repo).get("one.md") == "bob", timeout=10, what="the marker claimed")
        assert _ledger(repo, "write.unannounced") == []
        _said(bob, "go")  # a real change: reported
        wait_until(lambda: _ledger(repo, "write.unannounced"), timeout=10, what="the real change on record")
        _said(bob, "go")  # put back as committed: no write
        wait_until(lambda: holders(repo).get("two.md") == "bob", timeout=10, what="the second marker claimed")
        assert len(_ledger(repo, "write.unannounced")) == 1
        _said(bob, "end")
        assert bob.wait(20) == 0
    finally:
        end_process(bob)


def test_a_link_replaced_under_run_is_reported_as_the_link_and_conflicts_with_its_claim(repo, coordinator):
    # the watcher reported the files of the folder a replaced link points to
    # (folder-link/util.py), and ``claim folder-link`` claimed only that folder: alice's
    # claim and bob's replacement of her link never met
    coordinator(*FAST)
    (repo.root / "folder-link").symlink_to("src")
    (repo.root / "lib").mkdir()
    (repo.root / "lib" / "util.py").write_text("u\n")
    subprocess.run(["git", "add", "."], cwd=repo.root, check=True, timeout=60)
    subprocess.run(["git", "commit", "-qm", "link"], cwd=repo.root, check=True, timeout=60, env=env_for())
    subprocess.run(["git", "merge", "-q", "main"], cwd=repo.other, check=True, timeout=60, env=env_for())
    assert cli("claim", "folder-link", "--agent", "alice", cwd=repo.root).rc == 0
    proc = subprocess.run([*LOCKSTEP, "run", "--agent", "bob", "--", "sh", "-c", "ln -sfn lib folder-link"],
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    blocked = [d for d in _intents(repo, "bob") if d["verdict"] == "block"]
    assert blocked and blocked[0]["paths"] == ["folder-link"] and blocked[0]["holders"] == ["alice"], (_intents(repo, "bob"), proc.stderr)
