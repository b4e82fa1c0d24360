"""The bundle probe's judgement (probes/kinds/bundle.py): rollbacks by order of first
sight, the window, the size budget.  Pure: the history and the time are parameters."""

from __future__ import annotations

import pytest

from probes.builtin import prepare
from probes.kinds.bundle import Deploy, judge, probe_bundle
from probes.model import (
    BUNDLE_ROLLED_BACK,
    BUNDLE_TOO_LARGE,
    PASS,
    ProbeError,
    ProbeSpec,
)

URL = "https://app.example.com/app.js"
HOUR = 3600.0


def history(*hashes: str, url: str = URL, start: float = 0.0, step: float = 60.0, size: int | None = 100) -> list[Deploy]:
    return [Deploy(url, h, size, start + i * step) for i, h in enumerate(hashes)]


def test_moving_forward_is_no_finding():
    found = judge(history("v1", "v2", "v3"), now=200.0, window=HOUR, max_size=None)
    assert found.rollbacks == [] and found.judged == 3 and found.newest == {URL: "v3"}


def test_an_older_bundle_after_a_newer_one_is_a_rollback():
    found = judge(history("v1", "v2", "v1"), now=200.0, window=HOUR, max_size=None)
    (rollback,) = found.rollbacks
    assert rollback.startswith(f"{URL} served v1 again at") and "after the newer v2" in rollback


def test_back_to_the_newest_is_not_a_rollback():
    found = judge(history("v1", "v2", "v1", "v2"), now=300.0, window=HOUR, max_size=None)
    assert len(found.rollbacks) == 1  # the second v1 only, not the last v2


def test_older_means_first_seen_earlier_not_seen_last():
    # v3 first seen before v2 ... v3 again after v2 is a rollback even if v3 was also seen later
    found = judge(history("v1", "v3", "v2", "v3"), now=300.0, window=HOUR, max_size=None)
    assert [r.split(" served ")[1].split(" ")[0] for r in found.rollbacks] == ["v3"]


def test_only_deploys_in_the_window_are_judged_against_the_whole_history():
    old = history("v1", "v2", start=0.0)  # long ago
    rollback = [Deploy(URL, "v1", 100, 10 * HOUR)]
    assert judge(old + rollback, now=10 * HOUR + 60, window=HOUR, max_size=None).rollbacks != []
    # an hour later the rollback has left the window: the finding clears
    assert judge(old + rollback, now=11 * HOUR + 61, window=HOUR, max_size=None).rollbacks == []


def test_each_url_has_its_own_history():
    other = "https://app.example.com/vendor.js"
    deploys = history("a", "b") + history("b", "a", url=other, start=200.0)  # b then a is forward there
    assert judge(deploys, now=400.0, window=HOUR, max_size=None).rollbacks == []
    assert judge(deploys + [Deploy(URL, "a", 1, 500.0)], now=600.0, window=HOUR, max_size=None, url=URL).rollbacks


def test_the_size_budget_judges_the_window_and_what_is_served_now():
    deploys = history("v1", size=900) + history("v2", start=HOUR * 5, size=100)
    assert judge(deploys, now=HOUR * 5 + 1, window=HOUR, max_size=500).too_large == []  # v1 left the window
    big_now = history("v1", size=100) + history("v2", start=60.0, size=900)
    (too_large,) = judge(big_now, now=HOUR * 5, window=HOUR, max_size=500).too_large  # out of the window, still served
    assert "900 bytes" in too_large and "max_size 500" in too_large
    assert judge(history("v1", size=None), now=1.0, window=HOUR, max_size=1).too_large == []  # size unknown


def _run(**params) -> object:
    spec, typed = prepare(ProbeSpec(name="bundle", kind="bundle", params=params))
    return probe_bundle(spec, typed)


def test_the_probe_names_the_finding_and_every_problem():
    deploys = [[URL, "v1", 100, 0.0], [URL, "v2", 900, 60.0], [URL, "v1", 100, 120.0]]
    result = _run(deploys=deploys, now=180.0, max_size=500)
    assert result.finding == BUNDLE_ROLLED_BACK and "(and 1 more)" in result.reason
    assert len(result.details["rollbacks"]) == 1 and len(result.details["too_large"]) == 1
    sized = _run(deploys=deploys[:2], now=180.0, max_size=500)
    assert sized.finding == BUNDLE_TOO_LARGE
    fine = _run(deploys=deploys[:2], now=180.0, url=URL)
    assert fine.verdict == PASS and "none older than one before it" in fine.reason
    nothing = _run(deploys=[], now=1.0)
    assert nothing.verdict == PASS and "no deploy of any URL recorded yet" in nothing.reason


def test_bad_params_are_refused():
    with pytest.raises(ProbeError, match="bad params"):
        prepare(ProbeSpec(name="b", kind="bundle", params={"window": "soon"}))
    with pytest.raises(ProbeError, match="bad params"):
        prepare(ProbeSpec(name="b", kind="bundle", params={"deploys": [["u", "h"]]}))
