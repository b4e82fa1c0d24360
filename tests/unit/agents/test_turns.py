"""The turn-end gate's report to the model (pure: a Gate in, text out)."""

from __future__ import annotations

from agents.turns import failure_report
from protocol import messages as m


def test_a_verify_that_ran_no_check_says_why_not_zero_of_zero():
    # a lockstep.toml that does not parse: the stop was blocked with "0 of 0 checks failed"
    reason = "/repo/lockstep.toml: invalid TOML: Expected '=' after a key (at line 1, column 8)"
    report = failure_report(m.Gate(subject="verify", verdict="fail", reason=reason, job="3.1"))
    assert report.startswith(f"lockstep: verify could not run on your worktree (job 3.1): {reason}")
    assert "0 of 0" not in report and "blocked" in report


def test_failing_checks_are_counted_and_listed_first():
    results = [{"name": "lint", "verdict": "pass"}, {"name": "test", "verdict": "fail", "exit_code": 1, "output": "E boom"}]
    report = failure_report(m.Gate(subject="verify", verdict="fail", reason="1 of 2 failed", job="3.2", results=results))
    assert report.startswith("lockstep: verify fails on your worktree (job 3.2): 1 of 2 checks failed.")
    assert report.index("test: failed (exit 1)") < report.index("E boom") < report.index("lint: passed")
