"""No merge conflicts by construction: the fresh-base gate, with real worktrees and git."""

from __future__ import annotations

import subprocess

from .conftest import cli, env_for, status, wait_until

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
