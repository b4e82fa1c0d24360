"""An install of the git guard by an older version (fewer hooks, other commands) is
reported outdated by `lockstep guard status` and upgraded by `lockstep guard install`."""

from __future__ import annotations

import subprocess
import sys

from .conftest import cli, env_for

OLD_HOOK = (  # what an older version wrote (before pre-merge-commit, under another module)
    "#!/bin/sh\n"
    "# Installed by `lockstep guard install`: refuse to commit/push files other agents hold.\n"
    f'exec "{sys.executable}" -m coordinator.cli guard {{hook}} "$@"\n'
)


def _old_install(repo):
    hooks = repo.root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-commit", "pre-push"):
        (hooks / hook).write_text(OLD_HOOK.format(hook=hook))
        (hooks / hook).chmod(0o755)
    return hooks


def _states(repo):
    got = cli("guard", "status", "--json", cwd=repo.other)
    assert got.rc == 0, got
    return got.json["state"], {h["hook"]: h["state"] for h in got.json["hooks"]}, got.json


def test_an_older_install_is_reported_outdated_and_upgraded_by_install(repo):
    assert _states(repo)[0] == "absent"
    assert "not installed" in cli("guard", "status", cwd=repo.root).out
    hooks = _old_install(repo)
    state, hooks_state, doc = _states(repo)
    assert state == "outdated" and doc["outdated"] is True
    assert hooks_state == {"pre-commit": "stale", "pre-push": "stale", "pre-merge-commit": "missing", "reference-transaction": "missing"}
    said = cli("guard", "status", cwd=repo.root).out
    assert said.startswith("the git guard is outdated (an older version installed it): run `lockstep guard install`")
    assert f"pre-merge-commit missing: {(hooks / 'pre-merge-commit').resolve()}" in said
    upgraded = cli("guard", "install", "--json", cwd=repo.other)
    assert upgraded.rc == 0, upgraded
    assert upgraded.json["added"] == [str((hooks / h).resolve()) for h in ("pre-merge-commit", "reference-transaction")]
    assert upgraded.json["upgraded"] == [str((hooks / h).resolve()) for h in ("pre-commit", "pre-push")]
    assert _states(repo)[:2] == ("current", dict.fromkeys(("pre-commit", "pre-push", "pre-merge-commit", "reference-transaction"), "current"))
    assert "coordinator.cli" not in (hooks / "pre-commit").read_text()
    # installing again changes nothing
    texts = {h: (hooks / h).read_text() for h in ("pre-commit", "pre-push", "pre-merge-commit", "reference-transaction")}
    again = cli("guard", "install", "--json", cwd=repo.root)
    assert again.rc == 0 and again.json["added"] == [] and again.json["upgraded"] == []
    assert {h: (hooks / h).read_text() for h in texts} == texts
    assert "already current" in cli("guard", "install", cwd=repo.root).out
    # and git runs the new hook: a merge that needs no resolution goes through the guard
    ran = subprocess.run(["git", "hook", "run", "pre-merge-commit", "--", "--help"], cwd=repo.root,
                         capture_output=True, text=True, env=env_for(), timeout=60)
    assert ran.returncode == 0 and "guard pre-commit" in ran.stderr, ran


def test_a_hook_whose_python_is_gone_is_stale(repo, tmp_path):
    assert cli("guard", "install", cwd=repo.root).rc == 0
    hook = repo.root / ".git" / "hooks" / "pre-push"
    hook.write_text(hook.read_text().replace(sys.executable, str(tmp_path / "gone" / "python")))
    state, hooks_state, _ = _states(repo)
    assert state == "outdated" and hooks_state["pre-push"] == "stale" and hooks_state["pre-commit"] == "current"


def test_a_users_hook_that_runs_the_guard_is_current_and_one_that_does_not_is_named(repo):
    hooks = repo.root / ".git" / "hooks"
    (hooks / "pre-commit").write_text("#!/bin/sh\nmake lint || exit 1\nlockstep guard pre-commit\n")
    assert cli("guard", "install", cwd=repo.root).rc == 0
    assert _states(repo)[1]["pre-commit"] == "yours" and _states(repo)[0] == "current"
    (hooks / "pre-push").write_text("#!/bin/sh\nexec make test\n")
    state, hooks_state, _ = _states(repo)
    assert state == "outdated" and hooks_state["pre-push"] == "foreign"
    said = cli("guard", "status", cwd=repo.root).out
    assert "does not run the guard: add `lockstep guard pre-push" in said
