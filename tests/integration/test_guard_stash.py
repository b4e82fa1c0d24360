"""`git stash` of changes to a held file: git has no stash hook, but it commits an
update of refs/stash, and the guard's reference-transaction hook sees that one and
warns on stderr.  Real git, real hooks, a real coordinator."""

from __future__ import annotations

from .conftest import cli
from .test_merges import FAST, _git


def test_stashing_changes_to_a_held_file_warns_and_other_ref_updates_say_nothing(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    bob = {"LOCKSTEP_AGENT": "bob"}
    assert cli("intent", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    (repo.other / "src" / "app.py").write_text("bob's work in progress\n")
    (repo.other / "src" / "new.py").write_text("untracked\n")
    stashed = _git(repo.other, "stash", "push", "-u", env=bob)
    assert stashed.returncode == 0, stashed.stderr
    assert "lockstep guard: warning: git stash took the changes to held files out of the worktree: src/app.py (bob)" in stashed.stderr
    assert "`git stash pop` it back before releasing" in stashed.stderr
    # a person stashing in bob's worktree is told too (bob is this worktree's live agent)
    (repo.other / "src" / "app.py").write_text("again\n")
    by_person = _git(repo.other, "stash")
    assert by_person.returncode == 0 and "src/app.py (bob)" in by_person.stderr, by_person.stderr
    # popping, committing, branching: no warning
    for args in (("stash", "pop"), ("commit", "-qam", "bob's work"), ("checkout", "-q", "-b", "next")):
        done = _git(repo.other, *args, env=bob)
        assert done.returncode == 0 and "lockstep guard" not in done.stderr, (args, done.stderr)
    # a stash of files nobody holds says nothing
    (repo.root / "src" / "app.py").write_text("main's scratch\n")
    quiet = _git(repo.root, "stash", env={"LOCKSTEP_AGENT": "alice"})
    assert quiet.returncode == 0 and "lockstep guard" not in quiet.stderr, quiet.stderr
    listed = cli("guard", "stashed", "--json", cwd=repo.root, env={"LOCKSTEP_AGENT": "alice"})
    assert listed.rc == 0 and listed.json["files"] == ["src/app.py"] and listed.json["held"] == []


def test_a_users_own_reference_transaction_hook_is_left_and_the_install_goes_on(repo):
    hook = repo.root / ".git" / "hooks" / "reference-transaction"
    hook.write_text("#!/bin/sh\nexit 0\n")
    installed = cli("guard", "install", "--json", cwd=repo.root)
    assert installed.rc == 0, installed
    assert installed.json["left"] == [str(hook.resolve())] and hook.read_text() == "#!/bin/sh\nexit 0\n"
    state = cli("guard", "status", "--json", cwd=repo.root).json
    assert state["state"] == "current" and {h["hook"]: h["state"] for h in state["hooks"]}["reference-transaction"] == "foreign"
