"""A file whose name holds glob characters (`a[1].py`, Next.js's `app/[slug]/page.tsx`)
is one file end to end: claimed with --literal, held after release while its commits are
unmerged (a merge hold on that file, not on the glob's `a1.py`), named as written by the
git guard, and its claim freed when a landing changes it."""

from __future__ import annotations

import subprocess
import sys

from .conftest import bare_origin, cli, env_for, make_repo, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")
NAME = "a[1].py"
PATTERN = "a\\[1].py"  # the pattern naming exactly that file


def _git(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          env=env_for(), capture_output=True, text=True, timeout=60)


def _with_bracketed_file(repo) -> None:
    """NAME and a1.py (what the glob NAME matches) on main and in bob's worktree."""
    (repo.root / NAME).write_text("x\n")
    (repo.root / "a1.py").write_text("y\n")
    assert _git(repo.root, "add", NAME, "a1.py").returncode == 0
    assert _git(repo.root, "commit", "-qm", "a bracketed name").returncode == 0
    assert _git(repo.other, "merge", "-q", "main").returncode == 0


def _bob_commits_and_releases(repo) -> None:
    assert cli("intent", "--agent", "bob", "--literal", NAME, cwd=repo.other).rc == 0
    (repo.other / NAME).write_text("bob\n")
    assert _git(repo.other, "commit", "-qam", "bob's change").returncode == 0
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0


def test_released_with_unmerged_commits_the_file_is_merge_held_not_the_glob(repo, coordinator):
    coordinator(*FAST)
    _with_bracketed_file(repo)
    _bob_commits_and_releases(repo)
    holds = {h["path"]: h["holder"] for h in status(repo)["merge_holds"]}
    assert holds == {PATTERN: "bob"}  # there was none: the claim's text never equalled git's name
    blocked = cli("intent", "--agent", "alice", NAME, "--json", cwd=repo.root)
    assert blocked.rc == 1 and "bob's 1 commit" in blocked.json["reason"], blocked
    assert cli("intent", "--agent", "alice", "a1.py", cwd=repo.root).rc == 0  # the glob's file is free




def test_the_guard_names_the_file_as_written_and_says_its_merge_hold_on_push(repo, coordinator, tmp_path):
    coordinator(*FAST)
    _with_bracketed_file(repo)
    _bob_commits_and_releases(repo)
    bare_origin(repo.root, tmp_path)
    assert _git(repo.root, "checkout", "-q", "-b", "person").returncode == 0
    (repo.root / NAME).write_text("a person's change\n")
    assert _git(repo.root, "commit", "-qam", "a person's change").returncode == 0
    assert cli("guard", "install", cwd=repo.root).rc == 0
    pushed = _git(repo.root, "push", "-q", "origin", "person")
    assert pushed.returncode != 0, pushed.stderr
    assert f"lockstep guard: {NAME} is in bob's merge hold" in pushed.stderr, pushed.stderr  # the hold, said
    assert f"held by live agents: {NAME} (in bob's merge hold" in pushed.stderr, pushed.stderr  # as named, not {PATTERN}


def test_a_landing_that_changes_the_file_frees_the_literal_claim_on_it(tmp_path, coordinator_in):
    repo = make_repo(tmp_path / "repo")
    (repo.root / "lockstep.toml").write_text(f'[checks.ok]\ncmd = "{sys.executable} -c pass"\n')
    assert _git(repo.root, "add", "lockstep.toml").returncode == 0
    assert _git(repo.root, "commit", "-qm", "a check").returncode == 0
    _with_bracketed_file(repo)
    coordinator_in(repo, *FAST)
    assert cli("claim", "--agent", "bob", "--literal", NAME, cwd=repo.other).rc == 0
    (repo.other / NAME).write_text("bob\n")
    assert _git(repo.other, "commit", "-qam", "bob's change").returncode == 0
    landed = cli("land", "--agent", "bob", "--json", cwd=repo.other, timeout=120)
    assert landed.rc == 0 and landed.json["verdict"] == "landed" and landed.json["changed"] == [NAME], landed
    wait_until(lambda: PATTERN not in {c["pattern"] for c in status(repo)["claims"]}, timeout=10,
               what="bob's claim on the landed file to be freed")


def test_under_run_a_commit_of_the_held_file_is_refused_and_of_the_globs_file_is_not(repo, coordinator):
    """alice holds the file a[1].py; bob, under `lockstep run`, writes and commits it (the
    git guard refuses, the watcher says whose it is), then a1.py, which the glob a[1].py
    would match but the file's claim does not cover (committed)."""
    coordinator(*FAST)
    _with_bracketed_file(repo)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    assert cli("claim", "--agent", "alice", "--literal", NAME, cwd=repo.root).rc == 0
    script = (
        f"echo bob > '{NAME}' && git add '{NAME}' && git commit -qm held; echo held=$?; git reset -q --hard; "
        "echo bob > a1.py && git add a1.py && git commit -qm free; echo free=$?"
    )
    ran = cli("run", "--agent", "bob", "--", "sh", "-c", script, cwd=repo.other, timeout=120)
    assert ran.rc == 0, ran
    assert "held=1" in ran.out and "free=0" in ran.out, ran
    assert f"{PATTERN}: held exclusively by alice" in ran.err, ran.err  # the guard's refusal, as bob's intent
    assert _git(repo.other, "log", "-1", "--format=%s").stdout.strip() == "free"
