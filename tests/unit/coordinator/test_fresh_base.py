"""The fresh-base gate in the pure core, over a hand-built integration index."""

from __future__ import annotations

from coordinator.integration import Change, IntegrationIndex
from protocol import messages as m

from .core_driver import Driver

OLD = "a" * 40  # an agent's head from before main changed x.py
NEW = "b" * 40  # the commit on main that changed x.py (and the tip)


def driver(**settings) -> Driver:
    d = Driver(**settings)
    index = IntegrationIndex("refs/heads/main")
    index.advance(NEW, [(Change(NEW, "w1", "tune x"), ["src/x.py"])])
    index.set_lag(OLD, frozenset({NEW}))
    d.core.integration = index
    return d


def test_stale_base_blocks_with_the_commit_and_a_fix():
    d = driver()
    s = d.hello("w2")
    decision = d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD))
    assert decision.verdict == "block" and decision.token is None
    assert "stale base: src/x.py changed on main in bbbbbbbbbb by w1 ('tune x')" in decision.reason
    assert "git merge main" in decision.reason
    assert decision.stale == [m.StaleBase(path="src/x.py", commit=NEW, author="w1", subject="tune x", branch="main")]
    assert not d.core.registry.claims  # nothing was claimed
    assert d.records[-1].KIND == "intent.decided" and d.records[-1].stale[0].commit == NEW


def test_fresh_head_and_untouched_paths_are_allowed():
    d = driver()
    s = d.hello("w2")
    assert d.send(m.Intent(session=s, paths=["src/x.py"], head=NEW)).verdict == "allow"
    s3 = d.hello("w3")
    assert d.send(m.Intent(session=s3, paths=["src/y.py"], head=OLD)).verdict == "allow"


def test_unknown_or_missing_head_is_not_judged():
    d = driver()
    s = d.hello("w2")
    assert d.send(m.Intent(session=s, paths=["src/x.py"], head="c" * 40)).verdict == "allow"
    d.send(m.Release(session=s, all=True))
    assert d.send(m.Intent(session=s, paths=["src/x.py"])).verdict == "allow"


def test_warn_setting_allows_and_claims_with_the_reason():
    d = driver(fresh_base="warn")
    s = d.hello("w2")
    decision = d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD))
    assert decision.verdict == "warn" and decision.token is not None
    assert decision.reason.startswith("stale base: src/x.py") and decision.stale


def test_parallel_warn_mode_only_warns():
    d = driver(mode="parallel-warn")
    s = d.hello("w2")
    assert d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD)).verdict == "warn"


def test_off_setting_ignores_the_base():
    d = driver(fresh_base="off")
    s = d.hello("w2")
    decision = d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD))
    assert decision.verdict == "allow" and not decision.stale


def test_claims_are_refused_for_a_stale_base():
    d = driver()
    s = d.hello("w2")
    refused = d.send(m.Claim(session=s, paths=["src/x.py", "docs/"], head=OLD))
    assert isinstance(refused, m.Refused) and "stale base: src/x.py" in refused.reason
    assert refused.stale[0].commit == NEW
    assert isinstance(d.send(m.Claim(session=s, paths=["src/x.py"], head=NEW)), m.Granted)


def test_a_head_that_is_not_a_commit_id_is_bad_input():
    d = driver()
    s = d.hello("w2")
    for head in ["--output=/tmp/x", "HEAD", "g" * 40, ""]:
        reply = d.send(m.Intent(session=s, paths=["src/x.py"], head=head))
        assert isinstance(reply, m.Error) and reply.code == "bad_request", head


def test_a_merge_in_progress_is_as_fresh_as_the_commits_it_brings():
    """The commit concluding a merge has HEAD and every MERGE_HEAD as parents: a change one
    of them has is in it; only what all of them lack is stale."""
    d = driver()
    other = "c" * 40  # a commit that lacks main's change too
    d.core.integration.set_lag(other, frozenset({NEW}))
    s = d.hello("w2")
    assert d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD, merging=[NEW])).verdict == "allow"
    d.send(m.Release(session=s, all=True))
    assert d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD, merging=[other])).verdict == "block"
    fresh = d.send(m.Fresh(paths=["src/x.py"], head=OLD, merging=[other, NEW]))
    assert fresh.verdict == "allow" and fresh.stale == []


def test_a_merge_naming_too_many_commits_is_bad_input():
    d = driver()
    s = d.hello("w2")
    error = d.send(m.Intent(session=s, paths=["src/x.py"], head=OLD, merging=[NEW] * (m.MERGING_LIMIT + 1)))
    assert isinstance(error, m.Error) and error.code == "bad_request" and "at most 16 commits" in error.message
