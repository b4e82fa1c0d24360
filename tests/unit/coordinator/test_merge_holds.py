"""Merge holds in the pure core: released paths wait for their commits to reach main."""

from __future__ import annotations

from coordinator.integration import IntegrationIndex
from protocol import messages as m

from .core_driver import Driver

C1, C2 = "1" * 40, "2" * 40


def driver(**settings) -> Driver:
    d = Driver(**settings)
    index = IntegrationIndex("refs/heads/main")
    index.advance("f" * 40, [])
    index.worktree_branch = {"/wt/w1": "refs/heads/w1"}
    index.unmerged = {"refs/heads/w1": {"src/x.py": (C1, C2), "src/y.py": (C2,)}}
    d.core.integration = index
    return d


def test_release_with_unmerged_commits_keeps_a_merge_hold_naming_holder_and_branch():
    d = driver()
    w1 = d.hello("w1", worktree="/wt/w1")
    assert d.intent(w1, "src/x.py").verdict == "allow"
    d.send(m.Release(session=w1, all=True))
    assert "merge.held" in d.kinds()
    w2 = d.hello("w2", worktree="/wt/w2")
    decision = d.intent(w2, "src/x.py")
    assert decision.verdict == "block"
    assert "held until w1's 2 commits touching it reach main (branch w1)" in decision.reason
    assert decision.conflicts[0].access == "merge-hold"
    assert d.intent(w2, "src/z.py").verdict == "allow"  # unclaimed, no commits: free
    assert d.intent(w1, "src/x.py").verdict == "allow"  # its own hold is no obstacle
    hold = d.status().merge_holds[0]
    assert (hold.path, hold.holder, hold.branch, hold.commits) == ("src/x.py", "w1", "w1", [C1, C2])


def test_warn_mode_refuses_merge_holds_too():
    d = driver(mode="parallel-warn")
    w1 = d.hello("w1", worktree="/wt/w1")
    d.claim(w1, "src/")
    d.send(m.Release(session=w1, all=True))
    assert {h.path for h in d.status().merge_holds} == {"src/x.py", "src/y.py"}  # a folder holds its files
    w2 = d.hello("w2")
    assert d.intent(w2, "src/y.py").verdict == "block"


def test_session_end_keeps_the_hold_and_merging_frees_it():
    d = driver()
    w1 = d.hello("w1", worktree="/wt/w1")
    d.intent(w1, "src/x.py")
    d.send(m.Bye(session=w1))
    assert [h.path for h in d.status().merge_holds] == ["src/x.py"]
    assert d.core.pending_merge_commits() == {C1, C2}
    d._absorb(d.core.commits_merged({C1}, d.now))
    assert d.status().merge_holds  # one of two commits is not enough
    d._absorb(d.core.commits_merged({C1, C2}, d.now))
    assert not d.status().merge_holds and "merge.freed" in d.kinds()
    w2 = d.hello("w2")
    assert d.intent(w2, "src/x.py").verdict == "allow"


def test_a_hold_whose_file_main_has_as_the_branch_has_it_is_freed_without_its_commits():
    d = driver()
    w1 = d.hello("w1", worktree="/wt/w1")
    d.claim(w1, "src/")
    d.send(m.Release(session=w1, all=True))
    # the shell compares main's version of each file with the newest held commit's
    assert d.core.merge_hold_versions() == {
        "src/x.py": ("src/x.py", "refs/heads/w1", C1), "src/y.py": ("src/y.py", "refs/heads/w1", C2),
    }
    d._absorb(d.core.commits_merged(set(), d.now, {"src/y.py"}))  # a squash merge brought y.py's change only
    assert [h.path for h in d.status().merge_holds] == ["src/x.py"]
    freed = [r for r in d.records if r.KIND == "merge.freed"]
    assert freed[-1].paths == ["src/y.py"] and freed[-1].reason == "main has its changes (a squash or rebase merge)"


def test_a_merge_hold_survives_a_restart():
    d = driver()
    w1 = d.hello("w1", worktree="/wt/w1")
    d.intent(w1, "src/x.py")
    d.send(m.Release(session=w1, all=True))
    again = Driver(history=d.records, now=100.0)
    assert [h.path for h in again.status().merge_holds] == ["src/x.py"]
    snap = d.core.registry.snapshot(d.now, 10.0)
    from coordinator.registry import Registry

    assert list(Registry.from_snapshot(snap, 0.0).merge_holds_by_path) == ["src/x.py"]


def test_operators_abandon_a_branch_or_force_a_path():
    d = driver()
    w1 = d.hello("w1", worktree="/wt/w1")
    d.claim(w1, "src/")
    d.send(m.Release(session=w1, all=True))
    freed = d.send(m.Release(paths=["src/y.py"], force=True, reason="obsolete", by="op"))
    assert freed.patterns == ["src/y.py"] and freed.holders == ["w1"]
    assert isinstance(d.send(m.Abandon(branch="nope")), m.Error)
    abandoned = d.send(m.Abandon(branch="w1", reason="closed", by="op"))
    assert abandoned.patterns == ["src/x.py"]
    assert not d.status().merge_holds
    freed_records = [r for r in d.records if r.KIND == "merge.freed"]
    assert freed_records and all("abandoned by op" in r.reason and r.forced for r in freed_records)


def test_no_hold_without_unmerged_commits_or_for_a_forced_release():
    d = driver()
    w3 = d.hello("w3", worktree="/wt/w3")  # a branch with nothing unmerged
    d.intent(w3, "src/x.py")
    d.send(m.Release(session=w3, all=True))
    w1 = d.hello("w1", worktree="/wt/w1")
    d.intent(w1, "src/x.py")
    d.send(m.Release(paths=["src/x.py"], force=True, reason="stuck", by="op"))
    assert not d.status().merge_holds
