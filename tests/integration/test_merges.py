"""No merge conflicts by construction: the fresh-base gate, with real worktrees and git."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import bare_origin, cli, env_for, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _git(cwd, *args, env=None):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env_for(env), timeout=30)


def _change_on_main(repo, text="main's change\n", author="alice"):
    (repo.root / "src" / "app.py").write_text(text)
    done = _git(repo.root, "-c", f"user.name={author}", "commit", "-qam", "tune the app")
    assert done.returncode == 0, done.stderr
    return _git(repo.root, "rev-parse", "HEAD").stdout.strip()


def test_a_stale_base_is_refused_and_accepted_after_merging_main(repo, coordinator):
    coordinator(*FAST)
    commit = _change_on_main(repo)  # bob's worktree branched before this
    refused = cli("intent", "src/app.py", "--agent", "bob", "--json", cwd=repo.other)
    assert refused.rc == 1, refused
    assert refused.json["verdict"] == "block"
    assert refused.json["reason"].startswith(f"stale base: src/app.py changed on main in {commit[:10]} by alice ('tune the app')")
    assert "run `git merge main` (or rebase) first" in refused.json["reason"]
    assert refused.json["stale"][0]["commit"] == commit
    assert "src/app.py" not in {c["pattern"] for c in status(repo)["claims"]}
    # a path main did not change is fine from the same old base
    assert cli("intent", "src/new.py", "--agent", "bob", cwd=repo.other).rc == 0
    claim = cli("claim", "src/app.py", "--agent", "bob", "--json", cwd=repo.other)
    assert claim.rc == 1 and claim.json["stale"][0]["path"] == "src/app.py"
    assert _git(repo.other, "merge", "-q", "main").returncode == 0
    allowed = cli("intent", "src/app.py", "--agent", "bob", "--json", cwd=repo.other)
    assert allowed.rc == 0 and allowed.json["verdict"] == "allow" and allowed.json["stale"] == []


def test_main_moving_while_the_coordinator_runs_is_seen_at_the_next_intent(repo, coordinator):
    coordinator(*FAST)
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    _change_on_main(repo, "again\n")  # no wait: the intent itself notices the moved ref
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 1
    integration = wait_until(lambda: status(repo)["statistics"].get("integration"), what="the index statistics")
    assert integration["branch"] == "main" and integration["rebuilds"] == 1


def test_warn_mode_allows_a_stale_base_and_says_why(repo, coordinator):
    coordinator(*FAST, "--fresh-base", "warn")
    _change_on_main(repo)
    warned = cli("intent", "src/app.py", "--agent", "bob", "--json", cwd=repo.other)
    assert warned.rc == 0 and warned.json["verdict"] == "warn"
    assert warned.json["reason"].startswith("stale base: src/app.py") and warned.json["token"] is not None


def test_the_guard_refuses_committing_a_stale_base_path(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.other).rc == 0
    _change_on_main(repo)
    (repo.other / "src" / "app.py").write_text("bob's change\n")
    _git(repo.other, "add", "src/app.py")
    refused = _git(repo.other, "commit", "-qm", "bob's change", env={"LOCKSTEP_AGENT": "bob"})
    assert refused.returncode != 0 and "stale base: src/app.py" in refused.stderr
    assert "git merge main" in refused.stderr


def _commit_in(worktree, text, message):
    (worktree / "src" / "app.py").write_text(text)
    done = _git(worktree, "commit", "-qam", message)
    assert done.returncode == 0, done.stderr


def _merge_holds(repo):
    return {h["path"]: h for h in status(repo)["merge_holds"]}


def test_a_merge_hold_survives_release_and_restart_and_is_freed_when_the_branch_merges(repo, coordinator_in):
    first = coordinator_in(repo, *FAST)
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    _commit_in(repo.other, "bob's change\n", "bob's change")
    released = cli("release", "--all", "--agent", "bob", cwd=repo.other)
    assert released.rc == 0, released
    refused = cli("intent", "src/app.py", "--agent", "alice", "--json", cwd=repo.root)
    assert refused.rc == 1
    assert "held until bob's 1 commit touching it reach main (branch wt-bob)" in refused.json["reason"]
    hold = _merge_holds(repo)["src/app.py"]
    assert hold["holder"] == "bob" and hold["branch"] == "wt-bob" and len(hold["commits"]) == 1
    assert "held until merged" in cli("status", cwd=repo.root).out
    first.stop()
    coordinator_in(repo, *FAST)  # the hold is ledger state
    assert "src/app.py" in _merge_holds(repo)
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 1
    assert _git(repo.root, "merge", "-q", "wt-bob").returncode == 0
    wait_until(lambda: not _merge_holds(repo), what="the merge hold to be freed by the merge")
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    tail = cli("ledger", "tail", "-n", "200", "--json", cwd=repo.root).out.splitlines()
    kinds = [json.loads(line)["kind"] for line in tail]
    assert "merge.held" in kinds and "merge.freed" in kinds


def test_a_merge_hold_survives_the_end_of_the_session(repo, coordinator):
    coordinator(*FAST)
    script = (
        "import subprocess, sys, pathlib\n"
        "assert subprocess.run([sys.executable, '-m', 'agents.cli', 'intent', 'src/app.py']).returncode == 0\n"
        "pathlib.Path('src/app.py').write_text('carol was here\\n')\n"
        "subprocess.run(['git', 'commit', '-qam', 'carol'], check=True)\n"
    )
    ran = cli("run", "--agent", "carol", "--", sys.executable, "-c", script, cwd=repo.other, timeout=60)
    assert ran.rc == 0, ran
    wait_until(lambda: "src/app.py" in _merge_holds(repo), what="the merge hold after the session ended")
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 1


def test_an_operator_abandons_a_branch_or_forces_a_path(repo, coordinator):
    coordinator(*FAST)
    assert cli("intent", "src/app.py", "src/other.py", "--agent", "bob", cwd=repo.other).rc == 0
    (repo.other / "src" / "other.py").write_text("x\n")
    _git(repo.other, "add", "src/other.py")
    _commit_in(repo.other, "bob's change\n", "bob's change")
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    assert set(_merge_holds(repo)) == {"src/app.py", "src/other.py"}
    forced = cli("release", "--force", "src/other.py", "--reason", "not needed", "--json", cwd=repo.root)
    assert forced.rc == 0 and forced.json["released"] == ["src/other.py"]
    assert cli("abandon", "nope", cwd=repo.root).rc == 2
    abandoned = cli("abandon", "wt-bob", "--reason", "dead end", "--json", cwd=repo.root)
    assert abandoned.rc == 0 and abandoned.json["released"] == ["src/app.py"]
    assert not _merge_holds(repo)
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0


def test_the_guard_refuses_a_persons_stale_base_commit_and_accepts_it_after_merging_main(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.other).rc == 0
    commit = _change_on_main(repo)
    (repo.other / "src" / "app.py").write_text("a person's change\n")
    _git(repo.other, "add", "src/app.py")
    refused = _git(repo.other, "commit", "-qm", "a person's change")  # no LOCKSTEP_AGENT: a person
    assert refused.returncode != 0
    assert f"stale base: src/app.py changed on main in {commit[:10]}" in refused.stderr and "git merge main" in refused.stderr
    # what the guard says under --json
    checked = cli("guard", "pre-commit", "--json", cwd=repo.other)
    assert checked.rc == 1 and checked.json["allowed"] is False and checked.json["agent"] is None
    _git(repo.other, "reset", "-q", "--hard")
    assert _git(repo.other, "merge", "-q", "main").returncode == 0
    (repo.other / "src" / "app.py").write_text("a person's change, on a fresh base\n")
    _git(repo.other, "add", "src/app.py")
    done = _git(repo.other, "commit", "-qm", "a person's change")
    assert done.returncode == 0, done.stderr


def _conflicting_merge_of_main(repo):
    """bob's branch and main both change src/app.py; ``git merge main`` in bob's worktree
    stops on the conflict (MERGE_HEAD is main's tip), as it does before a person or an
    agent resolves it."""
    (repo.other / "src" / "app.py").write_text("bob's change\n")
    assert _git(repo.other, "commit", "-qam", "bob's change", "--no-verify").returncode == 0
    _change_on_main(repo)
    assert _git(repo.other, "merge", "main").returncode != 0  # the conflict
    (repo.other / "src" / "app.py").write_text("both changes\n")  # resolved
    assert _git(repo.other, "add", "src/app.py").returncode == 0


def test_resolving_and_concluding_a_merge_of_main_is_no_stale_base(repo, coordinator):
    """The commit that concludes ``git merge main`` has main's tip as a parent: what main
    changed is in it, so neither the resolving write nor that commit is refused as stale."""
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.other).rc == 0
    _conflicting_merge_of_main(repo)
    resolving = cli("intent", "src/app.py", "--agent", "bob", "--json", cwd=repo.other)
    assert resolving.rc == 0 and resolving.json["verdict"] == "allow" and resolving.json["stale"] == [], resolving
    done = _git(repo.other, "commit", "--no-edit", env={"LOCKSTEP_AGENT": "bob"})
    assert done.returncode == 0, done.stderr
    # a merge of something else than main does not freshen what main changed
    (repo.root / "src" / "app.py").write_text("main again\n")  # past bob's merge hold: what is tested is the base
    assert _git(repo.root, "commit", "-qam", "main again", "--no-verify").returncode == 0
    _git(repo.other, "checkout", "-q", "-b", "side", "HEAD~1")
    (repo.other / "side.txt").write_text("side\n")
    _git(repo.other, "add", "side.txt")
    assert _git(repo.other, "commit", "-qm", "side", "--no-verify").returncode == 0
    assert _git(repo.other, "merge", "--no-commit", "-q", "wt-bob").returncode == 0
    stale = cli("intent", "src/app.py", "--agent", "bob", "--json", cwd=repo.other)
    assert stale.rc == 1 and stale.json["reason"].startswith("stale base: src/app.py"), stale


def test_a_person_concludes_a_merge_of_main_through_the_guard(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.other).rc == 0
    _conflicting_merge_of_main(repo)
    checked = cli("guard", "pre-commit", "--json", cwd=repo.other)
    assert checked.rc == 0 and checked.json["allowed"] is True, checked
    done = _git(repo.other, "commit", "--no-edit")  # no LOCKSTEP_AGENT: a person
    assert done.returncode == 0, done.stderr


def test_warn_mode_lets_a_persons_stale_base_commit_through_with_a_warning(repo, coordinator):
    coordinator(*FAST, "--fresh-base", "warn")
    assert cli("guard", "install", cwd=repo.other).rc == 0
    _change_on_main(repo)
    (repo.other / "src" / "app.py").write_text("a person's change\n")
    _git(repo.other, "add", "src/app.py")
    done = _git(repo.other, "commit", "-qm", "a person's change")
    assert done.returncode == 0 and "warning: stale base: src/app.py" in done.stderr


def test_the_guard_refuses_a_persons_commit_and_push_of_a_path_in_anothers_merge_hold(repo, coordinator, tmp_path):
    coordinator(*FAST)
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    _commit_in(repo.other, "bob's change\n", "bob's change")
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    assert "src/app.py" in _merge_holds(repo)
    # a commit made before the hold existed (so pre-commit never saw it), pushed now
    bare_origin(repo.root, tmp_path)
    _git(repo.root, "checkout", "-q", "-b", "person")
    (repo.root / "src" / "app.py").write_text("a person's change\n")
    assert _git(repo.root, "commit", "-qam", "a person's change").returncode == 0
    assert cli("guard", "install", cwd=repo.root).rc == 0
    pushed = _git(repo.root, "push", "-q", "origin", "person")
    assert pushed.returncode != 0
    assert "src/app.py" in pushed.stderr and "bob's merge hold" in pushed.stderr
    # and a new commit of it
    (repo.root / "src" / "app.py").write_text("more\n")
    _git(repo.root, "add", "src/app.py")
    committed = _git(repo.root, "commit", "-qm", "more")
    assert committed.returncode != 0 and "bob's merge hold" in committed.stderr


def test_a_push_is_checked_for_its_own_commits_not_those_already_on_the_integration_branch(repo, coordinator, tmp_path):
    coordinator(*FAST)
    _change_on_main(repo)  # alice's work, landed
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0  # and she goes on with it
    bare_origin(repo.root, tmp_path, push=None)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    bob = {"LOCKSTEP_AGENT": "bob"}
    assert _git(repo.other, "merge", "-q", "main").returncode == 0  # as the stale-base gate asks
    (repo.other / "src" / "bob.py").write_text("bob's file\n")
    _git(repo.other, "add", "src/bob.py")
    assert _git(repo.other, "commit", "-qm", "bob's file", env=bob).returncode == 0
    # the first push to a new remote: main's commits (src/app.py among them) are not bob's
    pushed = _git(repo.other, "push", "-q", "origin", "wt-bob", env=bob)
    assert pushed.returncode == 0, pushed.stderr
    # pushing main itself is checked for all it sends: here nothing the remote lacks
    pushed = _git(repo.root, "push", "-q", "origin", "main")
    assert pushed.returncode == 0, pushed.stderr
    # bob's own change to alice's file, committed past the guard, is still refused
    (repo.other / "src" / "app.py").write_text("bob's change\n")
    assert _git(repo.other, "commit", "-qam", "past the guard", "--no-verify", env=bob).returncode == 0
    refused = _git(repo.other, "push", "-q", "origin", "wt-bob", env=bob)
    assert refused.returncode != 0 and "src/app.py" in refused.stderr and "alice" in refused.stderr


def test_concluding_a_merge_of_main_is_not_refused_for_mains_changes_to_a_held_file(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    _change_on_main(repo)  # alice's work, landed
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0  # and she goes on with it
    bob = {"LOCKSTEP_AGENT": "bob"}
    for who in (bob, None):  # an agent, then a person
        assert _git(repo.other, "merge", "-q", "--no-ff", "--no-commit", "main").returncode == 0
        # a resolution that changes alice's file is bob's write: refused
        (repo.other / "src" / "app.py").write_text("bob's resolution\n")
        _git(repo.other, "add", "src/app.py")
        refused = _git(repo.other, "commit", "-q", "--no-edit", env=who)
        assert refused.returncode != 0 and "src/app.py" in refused.stderr and "alice" in refused.stderr
        # main's own change, as it is, is everyone's base
        assert _git(repo.other, "checkout", "MERGE_HEAD", "--", "src/app.py").returncode == 0
        done = _git(repo.other, "commit", "-q", "--no-edit", env=who)
        assert done.returncode == 0, done.stderr
        assert _git(repo.other, "reset", "-q", "--hard", "HEAD~1").returncode == 0


def test_commits_on_a_detached_head_are_merge_held_at_release(repo, coordinator):
    coordinator(*FAST)
    assert _git(repo.other, "checkout", "-q", "--detach").returncode == 0
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    _commit_in(repo.other, "bob's change\n", "bob's change on no branch")
    commit = _git(repo.other, "rev-parse", "HEAD").stdout.strip()
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    hold = _merge_holds(repo).get("src/app.py")
    assert hold is not None and hold["holder"] == "bob" and hold["commits"] == [commit]
    refused = cli("intent", "src/app.py", "--agent", "alice", "--json", cwd=repo.root)
    assert refused.rc == 1 and f"(detached HEAD {commit})" in refused.json["reason"]
    assert f"lockstep abandon {commit}" in refused.json["reason"]
    assert _git(repo.root, "merge", "-q", commit).returncode == 0  # the commit reaches main
    wait_until(lambda: not _merge_holds(repo), what="the merge hold to be freed by the merge")
    # and an operator can abandon one by the commit id it names
    assert _git(repo.other, "checkout", "-q", "--detach", "main").returncode == 0
    assert cli("intent", "src/other.py", "--agent", "bob", cwd=repo.other).rc == 0
    (repo.other / "src" / "other.py").write_text("x\n")
    _git(repo.other, "add", "src/other.py")
    assert _git(repo.other, "commit", "-qm", "other").returncode == 0
    commit = _git(repo.other, "rev-parse", "HEAD").stdout.strip()
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    assert "src/other.py" in _merge_holds(repo)
    assert cli("abandon", commit, cwd=repo.root).rc == 0
    assert not _merge_holds(repo)


def test_a_worktree_removed_before_its_session_ends_still_leaves_a_merge_hold(repo, coordinator, agents):
    coordinator(*FAST)
    bob = agents("bob", repo.other)
    assert bob.do("intent", paths=["src/app.py"]).get("verdict") == "allow"
    _commit_in(repo.other, "bob's change\n", "bob's change")
    wait_until(lambda: status(repo)["statistics"].get("integration"), what="the index")
    # the orchestrator cleans up the worktree (its branch stays, unmerged), then bob ends
    assert _git(repo.root, "worktree", "remove", "--force", str(repo.other)).returncode == 0
    assert bob.do("exit") == {"event": "bye"}
    hold = wait_until(lambda: _merge_holds(repo).get("src/app.py"), timeout=20, what="the merge hold")
    assert hold["holder"] == "bob" and hold["branch"] == "wt-bob"
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 1


def test_commits_on_a_branch_the_agent_switched_away_from_are_merge_held_at_release(repo, coordinator):
    coordinator(*FAST)
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    _commit_in(repo.other, "bob's change\n", "bob's change")
    commit = _git(repo.other, "rev-parse", "HEAD").stdout.strip()
    # on to the next task before releasing: a new branch from main
    assert _git(repo.other, "checkout", "-q", "-b", "next-task", "main").returncode == 0
    assert cli("release", "--all", "--agent", "bob", cwd=repo.other).rc == 0
    hold = _merge_holds(repo).get("src/app.py")
    assert hold is not None and hold["branch"] == "wt-bob" and hold["commits"] == [commit]
    assert cli("intent", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 1


def test_a_force_push_after_rebasing_onto_main_is_checked_for_the_rebased_commits_only(repo, coordinator, tmp_path):
    coordinator(*FAST)
    bare_origin(repo.root, tmp_path)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    bob = {"LOCKSTEP_AGENT": "bob"}
    (repo.other / "src" / "bob.py").write_text("bob's file\n")
    _git(repo.other, "add", "src/bob.py")
    assert _git(repo.other, "commit", "-qm", "bob's file", env=bob).returncode == 0
    assert _git(repo.other, "push", "-q", "origin", "wt-bob", env=bob).returncode == 0
    _change_on_main(repo)  # alice's work, landed
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert _git(repo.other, "rebase", "-q", "main").returncode == 0
    pushed = _git(repo.other, "push", "-q", "--force", "origin", "wt-bob", env=bob)
    assert pushed.returncode == 0, pushed.stderr


def test_a_merge_that_needs_no_resolution_is_checked_too(repo, coordinator):
    """git runs no pre-commit for a clean merge: merging a branch that changes a file
    someone holds went through unchecked.  pre-merge-commit runs the same check."""
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    _change_on_main(repo)  # alice's work, landed
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0  # and she goes on with it
    _git(repo.root, "checkout", "-q", "-b", "side")
    (repo.root / "src" / "app.py").write_text("side's change\n")
    assert _git(repo.root, "commit", "-qam", "side", "--no-verify").returncode == 0
    _git(repo.root, "checkout", "-q", "main")
    for who in ({"LOCKSTEP_AGENT": "bob"}, None):  # an agent, then a person
        refused = _git(repo.other, "merge", "-q", "--no-ff", "--no-edit", "side", env=who)
        assert refused.returncode != 0 and "src/app.py" in refused.stderr and "alice" in refused.stderr, refused.stderr
        assert _git(repo.other, "merge", "--abort").returncode == 0
        # main's own change comes in without a word (it is everyone's base)
        merged = _git(repo.other, "merge", "-q", "--no-ff", "--no-edit", "main", env=who)
        assert merged.returncode == 0, merged.stderr
        assert _git(repo.other, "reset", "-q", "--hard", "HEAD~1").returncode == 0


def test_a_clean_merge_of_main_into_a_file_main_also_changed_is_no_stale_base(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    (repo.root / "src" / "app.py").write_text("1\n2\n3\n4\n5\n6\n7\n8\n")
    assert _git(repo.root, "commit", "-qam", "lines", "--no-verify").returncode == 0
    bob = {"LOCKSTEP_AGENT": "bob"}
    assert _git(repo.other, "merge", "-q", "main").returncode == 0
    (repo.other / "src" / "app.py").write_text("bob\n2\n3\n4\n5\n6\n7\n8\n")
    assert _git(repo.other, "commit", "-qam", "bob's line", env=bob).returncode == 0
    (repo.root / "src" / "app.py").write_text("1\n2\n3\n4\n5\n6\n7\nmain\n")
    assert _git(repo.root, "commit", "-qam", "main's line", "--no-verify").returncode == 0
    # both lines in one file: the merge is clean, and it is what the stale base asks for
    merged = _git(repo.other, "merge", "-q", "--no-ff", "--no-edit", "main", env=bob)
    assert merged.returncode == 0, merged.stderr
    assert (repo.other / "src" / "app.py").read_text() == "bob\n2\n3\n4\n5\n6\n7\nmain\n"
