"""`lockstep land` and the merge queue, with real worktrees, a real pytest check suite
and a real coordinator: the integration branch only moves to a merged, verified commit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from .conftest import (
    LOCKSTEP,
    Repo,
    cli,
    end_process,
    env_for,
    make_repo,
    status,
    wait_until,
)
from .test_turns import CLAUDE_AGENT, _answer, _fixture, _hook

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")
CALC = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
# A check that waits for a file (the test's way to hold a landing in its verify stage).
GATE = (
    "import pathlib, sys, time\n"
    "go = pathlib.Path(sys.argv[1])\n"
    "deadline = time.monotonic() + 120\n"
    "while not go.exists() and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
    "sys.exit(0 if go.exists() else 1)\n"
)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout.strip()


def land_repo(tmp_path: Path, gate: Path | None = None, required: bool = False, batch: int = 1, git_timeout: float | None = None) -> Repo:
    """main with a tiny library, its pytest suite and [checks] (and ``[land] required``,
    ``batch``, ``git_timeout``); worktrees wt-bob and wt-alice on their own branches, both at main."""
    repo = make_repo(tmp_path / "repo")
    (repo.root / "calc.py").write_text(CALC)
    (repo.root / "tests").mkdir()
    (repo.root / "tests" / "test_calc.py").write_text(TEST)
    checks = f'[checks.test]\ncmd = "{sys.executable} -m pytest -q -p no:cacheprovider tests"\n'
    if gate is not None:
        (repo.root / "gate.py").write_text(GATE)
        checks += f'\n[checks.gate]\ncmd = "{sys.executable} gate.py {gate}"\n'
    if required or batch > 1 or git_timeout is not None:
        checks += f"\n[land]\nrequired = {'true' if required else 'false'}\nbatch = {batch}\n"
        checks += f"git_timeout = {git_timeout}\n" if git_timeout is not None else ""
    (repo.root / "lockstep.toml").write_text(checks)
    git(repo.root, "add", ".")
    git(repo.root, "commit", "-qm", "a library and its tests")
    git(repo.other, "merge", "-q", "main")
    git(repo.root, "worktree", "add", "-q", str(repo.root.parent / "wt-alice"))
    return repo


def alice(repo: Repo) -> Path:
    return repo.root.parent / "wt-alice"


def commit(worktree: Path, path: str, text: str, message: str) -> str:
    (worktree / path).parent.mkdir(parents=True, exist_ok=True)
    (worktree / path).write_text(text)
    git(worktree, "add", path)
    git(worktree, "commit", "-qm", message)
    return git(worktree, "rev-parse", "HEAD")


def main_tip(repo: Repo) -> str:
    return git(repo.root, "rev-parse", "refs/heads/main")


def land(worktree: Path, agent: str, *extra: str):
    return cli("land", "--agent", agent, "--json", *extra, cwd=worktree, timeout=180)


def start_land(worktree: Path, agent: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*LOCKSTEP, "land", "--agent", agent, "--json"], cwd=worktree, env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 180) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert out.strip(), (proc.returncode, err)
    return {"rc": proc.returncode, **json.loads(out)}


def land_events(repo: Repo) -> list[dict]:
    tail = cli("ledger", "tail", "-n", "500", "--kind", "land.*", "--json", cwd=repo.root)
    assert tail.rc == 0, tail
    return [json.loads(line) for line in tail.out.splitlines()]


def kinds_of(repo: Repo, job: str) -> list[str]:
    return [e["kind"] for e in land_events(repo) if e["data"].get("job") == job]


@pytest.fixture
def lrepo(tmp_path):
    return land_repo(tmp_path)


def test_a_clean_landing_moves_main_and_its_checkout_and_frees_the_changed_files(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    assert cli("intent", "calc.py", "notes.txt", "--agent", "bob", cwd=repo.other).rc == 0
    head = commit(repo.other, "calc.py", CALC + "\n\ndef sub(a, b):\n    return a - b\n", "sub")
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 0, result
    landing = result.json
    assert landing["verdict"] == "landed" and landing["stage"] == "finished"
    tip = main_tip(repo)
    assert landing["commit"] == tip and landing["base"] == before and landing["changed"] == ["calc.py"]
    # always a merge commit: main's first-parent history is the commits it was verified at
    assert git(repo.root, "rev-parse", f"{tip}^1", f"{tip}^2").split() == [before, head]
    assert [r["name"] for r in landing["results"]] == ["test"] and landing["results"][0]["verdict"] == "pass"
    assert "def sub" in (repo.root / "calc.py").read_text()  # the main worktree moved with main
    assert git(repo.root, "status", "--porcelain", "--untracked-files=no") == ""
    claims = {c["pattern"]: c["holder"] for c in status(repo)["claims"]}
    assert "calc.py" not in claims and claims.get("notes.txt") == "bob"  # only the landed file is freed
    assert kinds_of(repo, landing["job"]) == ["land.queued", "land.preflight", "land.verifying", "land.landed"]
    text = cli("land", "--agent", "bob", cwd=repo.other, timeout=60)  # nothing new: already there
    assert text.rc == 0 and text.out.startswith("landed: ")


def test_a_commit_made_past_the_guard_does_not_land_a_file_another_agent_holds(lrepo, coordinator_in):
    """The guard refuses to commit or push a file another live agent holds; a commit made
    past it (``git commit --no-verify``) is refused by the queue too, and lands once freed."""
    repo = lrepo
    coordinator_in(repo, *FAST)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    assert cli("claim", "calc.py", "--agent", "alice", cwd=alice(repo)).rc == 0
    (repo.other / "calc.py").write_text(CALC + "\n\ndef sub(a, b):\n    return a - b\n")
    git(repo.other, "add", "calc.py")
    refused = subprocess.run(["git", "commit", "-qm", "sub"], cwd=repo.other, env=env_for({"LOCKSTEP_AGENT": "bob"}),
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "calc.py" in refused.stderr
    git(repo.other, "commit", "-qm", "sub", "--no-verify")
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 1 and result.json["verdict"] == "blocked", result
    assert "changes files others hold: calc.py (held exclusively by alice" in result.json["reason"]
    assert main_tip(repo) == before
    assert cli("release", "--all", "--agent", "alice", cwd=alice(repo)).rc == 0
    assert land(repo.other, "bob").json["verdict"] == "landed"


def test_landing_a_merge_frees_the_merge_holds_of_the_branch_at_once(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    commit(repo.root, "README.md", "main moved on\n", "readme")  # not a fast-forward any more
    assert cli("intent", "calc.py", "--agent", "bob", cwd=repo.other).rc == 0
    commit(repo.other, "calc.py", CALC + "# bob\n", "bob's change")
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    wait_until(lambda: any(h["path"] == "calc.py" for h in status(repo)["merge_holds"]), what="bob's merge hold")
    result = land(repo.other, "bob")
    assert result.rc == 0, result
    tip = main_tip(repo)
    assert result.json["commit"] == tip and git(repo.root, "rev-parse", f"{tip}^2") == git(repo.other, "rev-parse", "HEAD")
    assert git(repo.root, "log", "-1", "--format=%an %s", tip) == "bob Land wt-bob (bob)"
    assert not status(repo)["merge_holds"]  # freed by the landing, in the same turn
    tail = cli("ledger", "tail", "-n", "50", "--kind", "merge.freed", "--json", cwd=repo.root).out
    freed = [json.loads(line) for line in tail.splitlines()]
    assert freed and freed[-1]["data"]["reason"].startswith("landed on main")


def test_a_conflicting_landing_is_refused_with_the_hunks_and_the_other_agent(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    theirs = commit(alice(repo), "calc.py", "def add(a, b):\n    return b + a\n", "commutative")
    assert land(alice(repo), "alice").rc == 0
    commit(repo.other, "calc.py", "def add(a, b):\n    return a+b  # bob\n", "bob's style")
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 1, result
    landing = result.json
    assert landing["verdict"] == "conflict" and main_tip(repo) == before  # untouched
    assert "alice" in landing["reason"] and "git merge main" in landing["reason"]
    (conflict,) = landing["conflicts"]
    assert conflict["path"] == "calc.py" and conflict["kind"] == "content"
    assert conflict["hunks"] == [{"line": 2, "ours": ["    return b + a"], "theirs": ["    return a+b  # bob"]}]
    assert conflict["commits"][0] == {"commit": theirs, "author": "t", "subject": "commutative", "agent": "alice"}
    assert kinds_of(repo, landing["job"])[-1] == "land.refused"
    text = cli("land", "--agent", "bob", cwd=repo.other, timeout=60)
    assert text.rc == 1 and text.out.startswith("conflict: ") and "main|     return b + a" in text.err


def test_a_landing_that_fails_its_checks_on_the_merged_tree_is_refused(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    assert cli("intent", "calc.py", "--agent", "bob", cwd=repo.other).rc == 0
    commit(repo.other, "calc.py", "def add(a, b):\n    return a - b\n", "broken")
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 1, result
    landing = result.json
    assert landing["verdict"] == "failed" and main_tip(repo) == before
    assert landing["results"][0]["name"] == "test" and landing["results"][0]["verdict"] != "pass"
    assert "assert" in landing["results"][0]["output"] and "test (" in landing["reason"]
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]}.get("calc.py") == "bob"  # keeps its claim


def test_the_branch_moving_while_queued_makes_the_landing_stale(tmp_path, coordinator_in):
    go = tmp_path / "go"
    repo = land_repo(tmp_path, gate=go)
    coordinator_in(repo, *FAST)
    commit(alice(repo), "a.txt", "a\n", "alice's file")
    commit(repo.other, "b.txt", "b\n", "bob's file")
    first = start_land(alice(repo), "alice")
    try:
        wait_until(lambda: "land.verifying" in [e["kind"] for e in land_events(repo)], timeout=60, what="alice verifying")
        second = start_land(repo.other, "bob")
        wait_until(lambda: sum(e["kind"] == "land.queued" for e in land_events(repo)) == 2, timeout=30, what="bob queued")
        commit(repo.other, "b.txt", "b2\n", "bob again")  # moves while queued
        go.write_text("go")
        assert finish(first)["verdict"] == "landed"
        stale = finish(second)
        assert stale["rc"] == 1 and stale["verdict"] == "stale" and "land it again" in stale["reason"]
    finally:
        go.write_text("go")
        for proc in (first, locals().get("second")):
            if proc is not None:
                end_process(proc)


def test_two_agents_landing_at_once_are_serialized(tmp_path, coordinator_in):
    go = tmp_path / "go"
    repo = land_repo(tmp_path, gate=go)
    coordinator_in(repo, *FAST)
    commit(alice(repo), "a.txt", "a\n", "alice's file")
    commit(repo.other, "b.txt", "b\n", "bob's file")
    procs = [start_land(alice(repo), "alice")]
    try:
        wait_until(lambda: "land.verifying" in [e["kind"] for e in land_events(repo)], timeout=60, what="alice verifying")
        procs.append(start_land(repo.other, "bob"))
        wait_until(lambda: sum(e["kind"] == "land.queued" for e in land_events(repo)) == 2, timeout=30, what="bob queued")
        queue = [(q["agent"], q["position"], q["stage"]) for q in status(repo)["landings"]]
        assert queue == [("alice", 0, "verifying"), ("bob", 1, "queued")]  # what status and top show
        assert "merge queue" in cli("status", cwd=repo.root).out
        go.write_text("go")
        first, second = finish(procs[0]), finish(procs[1])
    finally:
        go.write_text("go")
        for proc in procs:
            end_process(proc)
    assert first["verdict"] == second["verdict"] == "landed"
    assert second["base"] == first["commit"]  # bob merged onto alice's landing, not beside it
    assert second["waited"] > 0
    order = [(e["kind"], e["agent"]) for e in land_events(repo) if e["kind"] != "land.queued"]
    assert order == [
        ("land.preflight", "alice"), ("land.verifying", "alice"), ("land.landed", "alice"),
        ("land.preflight", "bob"), ("land.verifying", "bob"), ("land.landed", "bob"),
    ]
    assert {"a.txt", "b.txt"} <= set(git(repo.root, "ls-tree", "--name-only", "main").split())


def test_a_commit_pushed_to_main_mid_landing_is_not_overwritten(tmp_path, coordinator_in):
    go = tmp_path / "go"
    repo = land_repo(tmp_path, gate=go)
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    proc = start_land(repo.other, "bob")
    try:
        wait_until(lambda: "land.verifying" in [e["kind"] for e in land_events(repo)], timeout=60, what="bob verifying")
        human = commit(repo.root, "HUMAN.md", "by hand\n", "a human's commit")  # main moves under the landing
        go.write_text("go")
        landing = finish(proc)
    finally:
        go.write_text("go")
        end_process(proc)
    assert landing["verdict"] == "landed" and landing["attempts"] == 2 and landing["base"] == human
    tip = main_tip(repo)
    assert git(repo.root, "merge-base", "--is-ancestor", human, tip) == ""  # (exit 0: kept)
    assert kinds_of(repo, landing["job"]) == [
        "land.queued", "land.preflight", "land.verifying", "land.requeued", "land.preflight", "land.verifying", "land.landed",
    ]
    assert (repo.root / "HUMAN.md").exists() and (repo.root / "b.txt").exists()


def test_a_dirty_checkout_of_main_blocks_the_landing_and_nothing_moves(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    (repo.root / "calc.py").write_text(CALC + "# half-done\n")
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 1 and result.json["verdict"] == "blocked", result
    assert "local changes (calc.py)" in result.json["reason"] and main_tip(repo) == before
    assert (repo.root / "calc.py").read_text() == CALC + "# half-done\n"  # the local change is kept as it was
    assert not (repo.root / "b.txt").exists()


def test_a_hook_refusing_to_move_main_blocks_the_landing_saying_so_not_as_main_moving(lrepo, coordinator_in):
    """A reference-transaction hook that refuses main's update: main did not move, so
    the landing is not retried as if it had ("moved under the landing 5 times")."""
    repo = lrepo
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    hook = repo.root / ".git" / "hooks" / "reference-transaction"
    hook.write_text("#!/bin/sh\nif grep -q refs/heads/main; then echo 'main is frozen' >&2; exit 1; fi\n")
    hook.chmod(0o755)
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 1 and result.json["verdict"] == "blocked", result
    reason = result.json["reason"]
    assert "moved" not in reason and "aborted by hook" in reason and "\n" not in reason, reason
    assert result.json["attempts"] == 1 and main_tip(repo) == before
    assert "land.requeued" not in kinds_of(repo, result.json["job"])
    hook.unlink()  # the queue still serves
    again = land(repo.other, "bob")
    assert again.rc == 0 and again.json["verdict"] == "landed", again


def _pausing_hook(repo: Repo, tmp_path: Path, stage: str, ignores_term: bool = False) -> tuple[Path, str]:
    """A reference-transaction hook that, at its ``stage`` call for main, the first time,
    writes its pid to the returned file and pauses until killed (a process whose command
    line names the returned token; with ``ignores_term``, deaf to SIGTERM too)."""
    armed, ran, token = tmp_path / "hang-once", tmp_path / "hook-pid", f"hook-pausing-{tmp_path}"
    armed.write_text("")
    pause = f"{sys.executable} -c 'import signal; signal.pause()' {token}"
    deaf = "trap '' TERM; " if ignores_term else ""  # SIG_IGN survives the exec
    hook = repo.root / ".git" / "hooks" / "reference-transaction"
    hook.write_text(f'#!/bin/sh\nif [ "$1" = {stage} ] && grep -q refs/heads/main && rm {armed} 2>/dev/null; then\n'
                    f'  echo $$ > {ran}; {deaf}exec {pause}\nfi\n')
    hook.chmod(0o755)
    return ran, token


def _processes_with(token: str) -> list[psutil.Process]:
    """Live processes whose command line names ``token``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(token in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("ignores_term", [False, True], ids=["pausing", "ignoring-sigterm"])
def test_a_hook_that_never_returns_refuses_the_landing_after_git_timeout_and_the_queue_goes_on(tmp_path, coordinator_in, ignores_term):
    """A reference-transaction hook that pauses until killed (or ignores SIGTERM too), as
    main's update is prepared: after ``[land] git_timeout`` git and the hook are ended,
    main has not moved, the landing is refused naming the command, the timeout and the
    hook, and the landing queued behind it lands (git's lock on main was removed)."""
    go = tmp_path / "go"
    repo = land_repo(tmp_path, gate=go, git_timeout=2)
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    commit(alice(repo), "a.txt", "a\n", "alice's file")
    ran, token = _pausing_hook(repo, tmp_path, "prepared", ignores_term)
    before = main_tip(repo)
    procs = [start_land(repo.other, "bob")]
    try:
        # bob's landing waits in its verify (the gate) until alice's is queued behind it
        wait_until(lambda: "land.verifying" in [e["kind"] for e in land_events(repo)], timeout=60, what="bob verifying")
        procs.append(start_land(alice(repo), "alice"))
        wait_until(lambda: sum(e["kind"] == "land.queued" for e in land_events(repo)) == 2, timeout=30, what="alice queued")
        assert [(q["agent"], q["stage"]) for q in status(repo)["landings"]] == [("bob", "verifying"), ("alice", "queued")]
        go.write_text("go")  # bob's landing goes on to move main, and the hook pauses
        refused = finish(procs[0], timeout=60)
        assert refused["rc"] == 1 and refused["verdict"] == "blocked", refused
        reason = refused["reason"]
        assert "git update-ref timed out after 2 s" in reason and "hook" in reason and "\n" not in reason, reason
        assert ran.exists()  # the hook did pause main's update
        wait_until(lambda: not _processes_with(token), timeout=10, what="the hook's process ended")
        landed = finish(procs[1], timeout=60)
    finally:
        go.write_text("go")
        for proc in procs:
            end_process(proc)
        for left in _processes_with(token):  # (the old queue left it paused)
            left.kill()
    assert landed["rc"] == 0 and landed["verdict"] == "landed", landed
    assert landed["base"] == before and main_tip(repo) == landed["commit"]
    assert (repo.root / "a.txt").exists() and not (repo.root / "b.txt").exists()
    recorded = [e for e in land_events(repo) if e["data"].get("job") == refused["job"]]
    assert recorded[-1]["kind"] == "land.refused" and recorded[-1]["data"]["reason"] == reason
    assert git(repo.root, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_hook_that_never_returns_after_main_moved_lands_the_landing_with_its_checkout(tmp_path, coordinator_in):
    """The same hook paused at its ``committed`` call: main did move, so the landing is
    landed (not refused with main holding it) and main's checkout follows, as after a
    coordinator killed between the two; the hook is ended all the same."""
    repo = land_repo(tmp_path, git_timeout=2)
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    ran, token = _pausing_hook(repo, tmp_path, "committed")
    before = main_tip(repo)
    proc = start_land(repo.other, "bob")
    try:
        landed = finish(proc, timeout=60)
        assert ran.exists()  # the hook did pause, after main moved
        wait_until(lambda: not _processes_with(token), timeout=10, what="the hook's process ended")
    finally:
        end_process(proc)
        for left in _processes_with(token):
            left.kill()
    assert landed["rc"] == 0 and landed["verdict"] == "landed", landed
    assert landed["base"] == before and main_tip(repo) == landed["commit"]
    assert (repo.root / "b.txt").read_text() == "b\n"
    assert git(repo.root, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_failing_post_checkout_hook_of_the_repository_does_not_block_landings(lrepo, coordinator_in):
    """The repository's post-checkout hook (written for people's checkouts) does not run
    in the coordinator's scratch worktree: failing there, it blocked every landing
    ("could not land: git worktree add", then "git checkout")."""
    repo = lrepo
    coordinator_in(repo, *FAST)
    hook = repo.root / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\necho 'npm install failed' >&2\nexit 1\n")
    hook.chmod(0o755)
    commit(repo.other, "b.txt", "b\n", "bob's file")  # the scratch worktree is made
    commit(alice(repo), "a.txt", "a\n", "alice's file")  # then checked out again
    for worktree, agent in ((repo.other, "bob"), (alice(repo), "alice")):
        result = land(worktree, agent)
        assert result.rc == 0 and result.json["verdict"] == "landed", result
    assert {"a.txt", "b.txt"} <= set(git(repo.root, "ls-tree", "--name-only", "main").split())


def test_a_check_that_rewrites_the_merged_files_refuses_the_landing_it_did_not_verify(lrepo, coordinator_in):
    """A check (not declared autofix) that changes a tracked file of the merged tree
    passed on content that is not what would land: the landing is refused naming the
    file, and main does not move.  Files git does not track (caches) are the checks' own."""
    repo = lrepo
    (repo.root / "lockstep.toml").write_text("[checks.fmt]\ncmd = \"sh -c 'echo \\\"# formatted\\\" >> calc.py; echo cache > cache.txt'\"\n")
    git(repo.root, "commit", "-qam", "a formatter as a check")
    git(repo.other, "merge", "-q", "main")
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    before = main_tip(repo)
    result = land(repo.other, "bob")
    assert result.rc == 1 and result.json["verdict"] == "failed", result
    assert "changed files" in result.json["reason"] and "(calc.py)" in result.json["reason"], result.json["reason"]
    assert main_tip(repo) == before and (repo.root / "calc.py").read_text() == CALC
    (repo.root / "lockstep.toml").write_text("[checks.cache]\ncmd = \"sh -c 'echo cache > cache.txt'\"\n")
    git(repo.root, "commit", "-qam", "a check writing an untracked cache only")
    landed = land(repo.other, "bob")
    assert landed.rc == 0 and landed.json["verdict"] == "landed", landed


def test_a_coordinator_killed_between_moving_main_and_its_checkout_brings_the_checkout_along_at_restart(lrepo, coordinator_in):
    """SIGKILL after main moved and before its checkout followed (a reference-transaction
    hook kills the coordinator as main's update commits): at restart the checkout is
    brought to main, not left showing the landing undone as local changes that block
    every later landing; the landing is decided once and the repository is sound."""
    repo = lrepo
    first = coordinator_in(repo, *FAST)
    assert cli("intent", "calc.py", "--agent", "bob", cwd=repo.other).rc == 0
    new_calc = CALC + "\n\ndef sub(a, b):\n    return a - b\n"
    commit(repo.other, "calc.py", new_calc, "sub")
    hook = repo.root / ".git" / "hooks" / "reference-transaction"
    hook.write_text(f'#!/bin/sh\nif [ "$1" = committed ] && grep -q refs/heads/main; then kill -9 {first.pid}; fi\n')
    hook.chmod(0o755)
    before = main_tip(repo)
    proc = start_land(repo.other, "bob")
    try:
        first.proc.wait(60)
        hook.unlink()
        assert main_tip(repo) != before  # main moved; its checkout did not
        assert git(repo.root, "status", "--porcelain", "--untracked-files=no") != ""
        coordinator_in(repo, *FAST)
        landed = finish(proc)
    finally:
        end_process(proc)
    assert landed["rc"] == 0 and landed["verdict"] == "landed", landed
    # decided after the restart as what it was: its merge commit, the file it brought (freed)
    assert landed["commit"] == main_tip(repo) and landed["base"] == before and landed["changed"] == ["calc.py"], landed
    assert "calc.py" not in {c["pattern"] for c in status(repo)["claims"]}
    assert git(repo.root, "status", "--porcelain", "--untracked-files=no") == ""
    assert (repo.root / "calc.py").read_text() == new_calc
    assert [e["kind"] for e in land_events(repo)].count("land.landed") == 1
    commit(alice(repo), "a.txt", "a\n", "alice's file")  # the queue is not blocked by the checkout
    after = land(alice(repo), "alice")
    assert after.rc == 0 and after.json["verdict"] == "landed", after
    assert (repo.root / "a.txt").read_text() == "a\n" and (repo.root / "calc.py").read_text() == new_calc
    fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=repo.root, capture_output=True, text=True, timeout=60)
    assert fsck.returncode == 0, fsck.stderr


def test_a_restart_mid_queue_resumes_it_in_order(tmp_path, coordinator_in):
    go = tmp_path / "go"
    repo = land_repo(tmp_path, gate=go)
    first = coordinator_in(repo, *FAST)
    commit(alice(repo), "a.txt", "a\n", "alice's file")
    commit(repo.other, "b.txt", "b\n", "bob's file")
    procs = [start_land(alice(repo), "alice")]
    try:
        wait_until(lambda: "land.verifying" in [e["kind"] for e in land_events(repo)], timeout=60, what="alice verifying")
        procs.append(start_land(repo.other, "bob"))
        wait_until(lambda: sum(e["kind"] == "land.queued" for e in land_events(repo)) == 2, timeout=30, what="bob queued")
        first.stop()  # mid-queue: alice verifying, bob waiting
        coordinator_in(repo, *FAST)
        go.write_text("go")
        landed = [finish(p) for p in procs]
    finally:
        go.write_text("go")
        for proc in procs:
            end_process(proc)
    assert [d["verdict"] for d in landed] == ["landed", "landed"], landed
    assert landed[1]["base"] == landed[0]["commit"]
    # the same jobs the clients followed; alice's verify, cut short by the restart, ran again
    assert kinds_of(repo, landed[0]["job"]) == [
        "land.queued", "land.preflight", "land.verifying", "land.preflight", "land.verifying", "land.landed",
    ]
    done = [e["agent"] for e in land_events(repo) if e["kind"] == "land.landed"]
    assert done == ["alice", "bob"]
    assert {"a.txt", "b.txt"} <= set(git(repo.root, "ls-tree", "--name-only", "main").split())


def _batched_repo(tmp_path: Path) -> tuple[Repo, Path, dict[str, Path]]:
    """[land] batch = 3 and four agents' worktrees; the gate holds the first landing."""
    go = tmp_path / "go"
    repo = land_repo(tmp_path, gate=go, batch=3)
    trees = {"alice": alice(repo), "bob": repo.other}
    for name in ("carol", "dave"):
        trees[name] = repo.root.parent / f"wt-{name}"
        git(repo.root, "worktree", "add", "-q", str(trees[name]))
    return repo, go, trees


def _queue_behind_carol(repo: Repo, go: Path, trees: dict[str, Path], names: list[str]) -> list[dict]:
    """carol's landing holds the queue in its verify while ``names`` queue behind it, in
    order; then every landing is let through and followed to its verdict."""
    procs = [start_land(trees["carol"], "carol")]
    try:
        wait_until(lambda: "land.verifying" in [e["kind"] for e in land_events(repo)], timeout=60, what="carol verifying")
        for n, name in enumerate(names, start=2):
            procs.append(start_land(trees[name], name))
            wait_until(lambda n=n: sum(e["kind"] == "land.queued" for e in land_events(repo)) == n, timeout=30, what=f"{name} queued")
        go.write_text("go")
        return [finish(p) for p in procs]
    finally:
        go.write_text("go")
        for proc in procs:
            end_process(proc)


def _verify_runs(repo: Repo) -> list[tuple[str, list[str]]]:
    """Each verify run of the queue: (the commit verified, the landings it verified)."""
    runs: dict[str, list[str]] = {}
    for event in land_events(repo):
        if event["kind"] == "land.verifying":
            runs.setdefault(event["data"]["candidate"], []).append(event["agent"])
    return list(runs.items())


def test_a_batch_of_queued_landings_is_verified_in_one_run(tmp_path, coordinator_in):
    repo, go, trees = _batched_repo(tmp_path)
    coordinator_in(repo, *FAST)
    for name in ("carol", "alice", "dave"):
        commit(trees[name], f"{name}.txt", f"{name}\n", f"{name}'s file")
    carol, first, second = _queue_behind_carol(repo, go, trees, ["alice", "dave"])
    assert [d["verdict"] for d in (carol, first, second)] == ["landed"] * 3
    tip = main_tip(repo)
    # alice and dave: one verify run on both merged, one move of main
    assert _verify_runs(repo) == [(carol["commit"], ["carol"]), (tip, ["alice", "dave"])]
    assert first["base"] == second["base"] == carol["commit"]
    assert second["commit"] == tip and first["commit"] == git(repo.root, "rev-parse", f"{tip}^1")
    assert first["changed"] == ["alice.txt"] and second["changed"] == ["dave.txt"]
    assert [r["name"] for r in second["results"]] == ["test", "gate"]
    assert git(repo.root, "rev-list", "--first-parent", "--count", f"{carol['commit']}..main") == "2"
    assert {"alice.txt", "carol.txt", "dave.txt"} <= set(git(repo.root, "ls-tree", "--name-only", "main").split())


def test_a_failing_batch_is_bisected_the_breaking_landing_refused_the_others_landed(tmp_path, coordinator_in):
    repo, go, trees = _batched_repo(tmp_path)
    coordinator_in(repo, *FAST)
    for name in ("carol", "alice", "dave"):
        commit(trees[name], f"{name}.txt", f"{name}\n", f"{name}'s file")
    commit(trees["bob"], "calc.py", "def add(a, b):\n    return a - b\n", "broken")
    carol, alice_, bob, dave = _queue_behind_carol(repo, go, trees, ["alice", "bob", "dave"])
    assert [d["verdict"] for d in (carol, alice_, bob, dave)] == ["landed", "landed", "failed", "landed"]
    assert "batched with it" in bob["reason"] and bob["results"][0]["name"] == "test" and bob["results"][0]["verdict"] != "pass"
    runs = _verify_runs(repo)
    # the batch of three fails; bisecting: alice alone passes, alice + bob fails: bob broke it
    assert [agents for _, agents in runs] == [["carol"], ["alice", "bob", "dave"], ["alice"], ["alice", "bob"], ["dave"]]
    assert alice_["commit"] == runs[2][0] and dave["commit"] == runs[4][0] == main_tip(repo)
    assert dave["base"] == alice_["commit"]  # dave went round again, onto what had landed
    tree = set(git(repo.root, "ls-tree", "--name-only", "main").split())
    assert {"alice.txt", "carol.txt", "dave.txt"} <= tree and (repo.root / "calc.py").read_text() == CALC


def test_bad_input_exits_2(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    assert cli("land", "--agent", "bob", "--branch", "no-such-branch", cwd=repo.other).rc == 2
    assert cli("land", "--agent", "bob", "--branch", "main", "--json", cwd=repo.other).rc == 2
    assert cli("land", "--json", cwd=repo.other).json["error"]["code"] == "bad_agent"
    git(repo.other, "branch", "fix/ü")  # a name git takes and lockstep land does not: said, not "not a branch"
    odd = cli("land", "--agent", "bob", "--branch", "fix/ü", cwd=repo.other)
    assert odd.rc == 2 and "'fix/ü': lockstep land takes branch names of up to 200 ASCII letters" in odd.err, odd
    git(repo.other, "checkout", "-q", "--detach")
    assert "detached HEAD" in cli("land", "--agent", "bob", cwd=repo.other).err


def test_the_mcp_tool_land_lands_and_reports_a_refusal_as_an_error(lrepo, coordinator_in):
    repo = lrepo
    coordinator_in(repo, *FAST)
    commit(repo.other, "b.txt", "b\n", "bob's file")
    calls = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "land", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "land", "arguments": {"branch": "no-such"}}},
    ]
    proc = subprocess.run([*LOCKSTEP, "mcp", "--agent", "bob"], input="".join(json.dumps(c) + "\n" for c in calls),
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=180)
    replies = {r["id"]: r["result"] for r in map(json.loads, proc.stdout.splitlines())}
    landed = json.loads(replies[2]["content"][0]["text"])
    assert not replies[2]["isError"] and landed["verdict"] == "landed" and landed["commit"] == main_tip(repo)
    assert replies[3]["isError"] and "no-such" in json.loads(replies[3]["content"][0]["text"])["error"]["message"]


# ---------------------------------------------------------------- [land] required: the turn-end gate


def _stop(client: str, worktree: Path, **changes) -> dict:
    """The client's real Stop payload, through the real `lockstep hook CLIENT`."""
    return _answer(_hook(client, _fixture(client, "stop.json", worktree, **changes), worktree))


def _turn_events(repo: Repo) -> list[tuple]:
    """The ledger's turn and stop events (what a failing turn-gate assertion shows)."""
    out = cli("ledger", "tail", "-n", "200", "--json", cwd=repo.root).out
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [(e["id"], e["kind"], e["agent"], e["session"], e["data"].get("verdict"), e["data"].get("tree")) for e in events
            if e["kind"].startswith(("turn.", "stop.", "agent.", "coordinator."))]


def _prompt(client: str, worktree: Path) -> None:
    assert _answer(_hook(client, _fixture(client, "user_prompt_submit.json", worktree), worktree)) == {}


def test_with_land_required_a_turn_ends_only_once_its_commit_landed_or_was_refused_and_reported(tmp_path, coordinator_in):
    repo = land_repo(tmp_path, required=True)
    coordinator_in(repo, *FAST)
    bob = repo.other
    _prompt("claude", bob)
    # uncommitted changes: blocked once, asking for a commit; nothing queued, main untouched
    before = main_tip(repo)
    (bob / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (bob / "new.py").write_text("x = 1\n")
    first = _stop("claude", bob)
    assert first["decision"] == "block", first
    assert "uncommitted changes" in first["reason"] and "git add -A && git commit" in first["reason"]
    assert "calc.py" in first["reason"] and "new.py" in first["reason"]
    assert not land_events(repo) and main_tip(repo) == before
    # stopping again on the same content: it was told; the turn ends, visibly not landed
    again = _stop("claude", bob, stop_hook_active=True)
    assert "decision" not in again and "uncommitted changes" in again["systemMessage"] and "not landed" in again["systemMessage"], (
        again, _turn_events(repo), git(bob, "status", "--porcelain", "--untracked-files=all"),
    )
    # a new turn; the broken change committed: the stop lands it, the checks fail on the merged tree
    _prompt("claude", bob)
    git(bob, "add", "-A")
    git(bob, "commit", "-qm", "broken")
    failed = _stop("claude", bob)
    assert failed["decision"] == "block", failed
    reason = failed["reason"]
    assert "refused: failed" in reason and reason.index("── test") < reason.index("Fix it on your branch")
    assert "assert" in reason and main_tip(repo) == before  # errors-first output; main untouched
    refused = [e for e in land_events(repo) if e["kind"] == "land.refused"]
    assert len(refused) == 1 and refused[0]["agent"] == CLAUDE_AGENT and refused[0]["data"]["head"] == git(bob, "rev-parse", "HEAD")
    # stopping again on that same commit: the refusal was reported; the turn ends, nothing re-runs
    told = _stop("claude", bob, stop_hook_active=True)
    assert "decision" not in told and "refusal reported" in told["systemMessage"]
    assert sum(e["kind"] == "land.queued" for e in land_events(repo)) == 1
    # the fix committed: the stop lands it and the turn ends; main and its checkout moved
    head = commit(bob, "calc.py", CALC, "fixed")
    landed = _stop("claude", bob)
    assert "decision" not in landed and "landed on main" in landed["systemMessage"], landed
    tip = main_tip(repo)
    assert tip != before and git(repo.root, "rev-parse", f"{tip}^2") == head
    assert (repo.root / "new.py").exists() and git(repo.root, "status", "--porcelain", "--untracked-files=no") == ""
    # nothing new since: the turn ends at once, from the ledger, no landing queued
    assert _stop("claude", bob) == {}
    assert sum(e["kind"] == "land.queued" for e in land_events(repo)) == 2
    decided = [json.loads(line)["data"] for line in cli("ledger", "tail", "-n", "50", "--kind", "stop.decided", "--json", cwd=repo.root).out.splitlines()]
    assert [d["verdict"] for d in decided] == ["block", "escalate", "escalate", "allow"]


def test_with_land_required_a_conflicting_stop_is_blocked_with_the_hunks_and_the_other_agent(tmp_path, coordinator_in):
    repo = land_repo(tmp_path, required=True)
    coordinator_in(repo, *FAST)
    bob = repo.other
    commit(alice(repo), "calc.py", "def add(a, b):\n    return b + a\n", "commutative")
    assert land(alice(repo), "alice").rc == 0
    before = main_tip(repo)
    _prompt("codex", bob)
    commit(bob, "calc.py", "def add(a, b):\n    return a+b  # bob\n", "bob's style")
    blocked = _stop("codex", bob)
    assert blocked["decision"] == "block", blocked
    reason = blocked["reason"]
    assert "refused: conflict" in reason and "alice" in reason and "── calc.py (content)" in reason
    assert "main|     return b + a" in reason and "wt-bob|     return a+b  # bob" in reason
    assert main_tip(repo) == before  # untouched
    # bob merges main, resolves and commits: the next stop lands it
    done = subprocess.run(["git", "merge", "-q", "main"], cwd=bob, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0  # the conflict, in bob's own worktree
    (bob / "calc.py").write_text("def add(a, b):\n    return b + a  # bob\n")
    git(bob, "add", "calc.py")
    git(bob, "commit", "-qm", "merge main")
    assert "landed on main" in _stop("codex", bob)["systemMessage"]
    assert "# bob" in (repo.root / "calc.py").read_text()
