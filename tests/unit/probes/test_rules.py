"""Findings -> responses and bounded retries (the repair loop and the done gate are
tested with the core: tests/test_core.py, tests/integration/test_checks.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from probes.config import parse_config
from probes.model import ProbeResult
from probes.rules import (
    DEFAULT_RULES,
    Finding,
    RepairState,
    Response,
    RuleTable,
    decide,
)

NOW = 1000.0


def f(phrase: str, probe: str = "p", agent: str | None = "alice", details: str = "") -> Finding:
    return Finding(finding=phrase, probe=probe, agent=agent, details=details)


def actions(responses: list[Response]) -> list[str]:
    return [r.action for r in responses]


# ---------------------------------------------------------------- the seed table


def test_two_endpoints_failing_restart_once():
    findings = [f("endpoint failing", "api", None), f("endpoint failing", "web", None),
                f("endpoint failing", "admin", None)]
    responses, state = decide(findings, RepairState(), NOW)
    assert actions(responses) == ["restart"]
    assert responses[0].probes == ("api", "web", "admin")
    assert responses[0].reason.startswith("default rule 1")
    assert state.retries == () and {s.probe for s in state.standing} == {"api", "web", "admin"}


def test_one_endpoint_failing_is_not_a_restart():
    responses, _ = decide([f("endpoint failing", "api")], RepairState(), NOW)
    assert actions(responses) == ["notify"]
    assert responses[0].reason.startswith("default rule 4")


def test_the_same_endpoint_twice_counts_once():
    findings = [f("endpoint failing", "api"), f("endpoint failing", "api")]
    assert actions(decide(findings, RepairState(), NOW)[0]) == ["notify"]


def test_build_produced_nothing_rolls_back():
    (response,), _ = decide([f("build produced nothing", "bundle")], RepairState(), NOW)
    assert response.action == "rollback"
    assert "build produced nothing" in response.reason


def test_every_default_rule_names_a_phrase_some_probe_reports():
    from probes.model import FINDINGS

    assert all(r.finding in (*FINDINGS, "*") for r in DEFAULT_RULES)


def test_an_answered_finding_is_not_answered_again_until_its_probe_passes():
    responses, state = decide([f("endpoint failing", "api", None)], RepairState(), NOW)
    assert actions(responses) == ["notify"]
    assert decide([f("endpoint failing", "api", None)], state, NOW + 10)[0] == []  # still failing: quiet
    again, _ = decide([f("endpoint failing", "api", None)], state.resolved(None, "api"), NOW + 20)
    assert actions(again) == ["notify"]  # it cleared, then came back


def test_a_second_endpoint_joining_within_the_window_restarts_once():
    table = RuleTable(parse_config(
        '[[rule]]\nfinding = "endpoint failing"\nmin_failing = 2\nwithin = "5m"\nresponse = "restart"\n'
    ).rules)
    first, state = table.decide([f("endpoint failing", "api", None)], RepairState(), NOW)
    assert actions(first) == ["notify"]  # alone: falls through to the catch-all
    recent = [(NOW, f("endpoint failing", "api", None))]
    second, state = table.decide([f("endpoint failing", "web", None)], state, NOW + 60, recent)
    assert actions(second) == ["restart"] and set(second[0].probes) == {"api", "web"}
    recent.append((NOW + 60, f("endpoint failing", "web", None)))
    assert table.decide([f("endpoint failing", "web", None)], state, NOW + 120, recent)[0] == []  # standing
    late = [(NOW, f("endpoint failing", "api", None))]
    assert actions(table.decide([f("endpoint failing", "web", None)], RepairState(), NOW + 301, late)[0]) == ["notify"]


def test_rules_match_kind_target_and_reason_text():
    table = RuleTable(parse_config(
        '[[rule]]\nfinding = "*"\nkind = "http"\ntarget = "http://127.0.0.1:*/api/*"\ncontains = "503"\nresponse = "block_agent"\n'
    ).rules)
    hit = Finding(finding="endpoint failing", probe="p", kind="http", target="http://127.0.0.1:80/api/x", details="answered 503")
    assert actions(table.decide([hit], RepairState(), NOW)[0]) == ["block_agent"]
    for miss in ({"kind": "command"}, {"target": "http://127.0.0.1:80/web"}, {"details": "answered 500"}):
        other = Finding(**{**{k: getattr(hit, k) for k in hit.__struct_fields__}, **miss})
        assert actions(table.decide([other], RepairState(), NOW)[0]) == ["notify"], miss


def test_unknown_findings_are_never_dropped():
    (response,), _ = decide([f("disk on fire")], RepairState(), NOW)
    assert response.action == "notify" and response.finding == "disk on fire"


def test_phrases_compare_without_case_or_spacing():
    (response,), _ = decide([f("  Build   Produced NOTHING ")], RepairState(), NOW)
    assert response.action == "rollback"


# ---------------------------------------------------------------- bounded retries


def test_write_lost_retries_in_smaller_chunks_then_escalates():
    state = RepairState()
    seen = []
    for _ in range(5):
        responses, state = decide([f("write lost", "write")], state, NOW)
        seen += responses
    assert actions(seen) == ["retry", "retry", "retry", "notify"]  # the escalation is said once
    assert [r.params["attempt"] for r in seen[:3]] == [1, 2, 3]
    assert all(r.params["message"] == "retry in smaller chunks" for r in seen[:3])
    assert all(r.params["max"] == 3 for r in seen[:3])
    assert seen[3].reason.startswith("retry bound reached")
    assert "persists after 3 retries" in seen[3].params["message"]
    assert state.retries_for("alice", "write lost") == 3


def test_retry_state_is_immutable_and_per_agent_and_finding():
    before = RepairState()
    _, after = decide([f("write lost", agent="alice")], before, NOW)
    assert before == RepairState()
    assert after.retries_for("alice", "write lost") == 1
    assert after.retries_for("bob", "write lost") == 0
    _, after = decide([f("write lost", agent="bob"), f("write lost", agent="alice")], after, NOW + 1)
    assert after.retries_for("alice", "WRITE LOST") == 2
    assert after.retries_for("bob", "write lost") == 1
    assert after.cleared("alice").retries_for("alice", "write lost") == 0
    assert after.cleared("alice").retries_for("bob", "write lost") == 1
    assert after.cleared("alice", "write lost") == after.cleared("alice")


def test_one_retry_per_agent_and_finding_per_batch():
    findings = [f("write lost", "write", "alice"), f("write lost", "write", "alice")]
    responses, state = decide(findings, RepairState(), NOW)
    assert actions(responses) == ["retry"]
    assert state.retries_for("alice", "write lost") == 1


def test_config_retry_bound_zero_escalates_at_once():
    config = parse_config('[[rule]]\nfinding = "write lost"\nresponse = "retry"\nmax = 0\n')
    (response,), state = decide([f("write lost")], RepairState(), NOW, RuleTable.from_config(config))
    assert response.action == "notify" and response.reason.startswith("retry bound reached")
    assert state.retries == ()
    assert decide([f("write lost")], state, NOW, RuleTable.from_config(config))[0] == []  # escalated once


@given(st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.sampled_from(["write lost", "x"])),
                max_size=30),
       st.integers(min_value=0, max_value=4))
@settings(max_examples=200, deadline=None)
def test_retries_never_exceed_the_bound(events, bound):
    config = parse_config(f'[[rule]]\nfinding = "write lost"\nresponse = "retry"\nmax = {bound}\n')
    table = RuleTable.from_config(config)
    state = RepairState()
    retries: dict[str | None, int] = {}
    for agent, phrase in events:
        responses, state = table.decide([f(phrase, agent=agent)], state, NOW)
        for response in responses:
            if response.action == "retry":
                retries[agent] = retries.get(agent, 0) + 1
        assert len(responses) <= 1  # one answer, or none once the escalation was said
    assert all(count <= bound for count in retries.values())
    # Same inputs, same outputs.
    again = RepairState()
    for agent, phrase in events:
        _, again = table.decide([f(phrase, agent=agent)], again, NOW)
    assert again == state


# ---------------------------------------------------------------- config rules


def test_config_rules_come_before_defaults():
    config = parse_config(
        '[[rule]]\nfinding = "build produced nothing"\nresponse = "notify"\nmessage = "look"\n'
    )
    (response,), _ = decide([f("build produced nothing")], RepairState(), NOW,
                            RuleTable.from_config(config))
    assert response.action == "notify" and response.params == {"message": "look"}
    assert response.reason.startswith("lockstep.toml: [[rule]] #1")


def test_first_matching_config_rule_wins_and_probe_filters():
    config = parse_config("""
[[probe]]
name = "deploy-info"
kind = "http"
url = "http://127.0.0.1:3000/deploy_info.json"
[[rule]]
finding = "endpoint failing"
probe = "deploy-info"
response = "touch"
path = "dist/index.html"
[[rule]]
finding = "*"
response = "block_agent"
[[rule]]
finding = "endpoint failing"
response = "restart"
""")
    table = RuleTable.from_config(config)
    (touch,), _ = table.decide([f("endpoint failing", "deploy-info")], RepairState(), NOW)
    assert touch.action == "touch" and touch.params == {"path": "dist/index.html"}
    (block,), _ = table.decide([f("endpoint failing", "api")], RepairState(), NOW)
    assert block.action == "block_agent"  # rule 2 is before rule 3
    assert table.match(f("endpoint failing", "api")) is config.rules[1]


def test_min_failing_falls_through_to_later_rules():
    config = parse_config(
        '[[rule]]\nfinding = "processes missing"\nmin_failing = 2\nresponse = "restart"\n'
        'cmd = "supervisorctl restart all"\n'
    )
    table = RuleTable.from_config(config)
    (one,), _ = table.decide([f("processes missing", "a")], RepairState(), NOW)
    assert one.action == "notify"
    (two,), _ = table.decide([f("processes missing", "a"), f("processes missing", "b")],
                             RepairState(), NOW)
    assert two.action == "restart" and two.params == {"cmd": "supervisorctl restart all"}
    assert "at least 2 probes failing" in two.reason


def test_queue_task_defaults_to_the_findings_agent():
    config = parse_config(
        '[[rule]]\nfinding = "timed out"\nresponse = "queue_task"\ntask = "why"\n'
        '[[rule]]\nfinding = "command failed"\nresponse = "queue_task"\ntask = "fix"\nagent = "ops"\n'
    )
    table = RuleTable.from_config(config)
    responses, _ = table.decide([f("timed out", agent="carol"), f("command failed", agent="carol")],
                                RepairState(), NOW)
    assert [r.params for r in responses] == [{"task": "why", "agent": "carol"},
                                            {"task": "fix", "agent": "ops"}]


def test_responses_keep_batch_order_and_time():
    findings = [f("write lost"), f("build produced nothing"), f("endpoint failing")]
    responses, _ = decide(findings, RepairState(), 42.5)
    assert actions(responses) == ["retry", "rollback", "notify"]
    assert {r.at for r in responses} == {42.5}
    assert decide(findings, RepairState(), 42.5) == (responses, _)


def test_finding_from_probe_result():
    failed = ProbeResult(name="api", kind="http", target="http://x", verdict="fail",
                         finding="endpoint failing", reason="status 500")
    assert Finding.from_result(failed, "bob") == Finding(
        finding="endpoint failing", probe="api", agent="bob", details="status 500", kind="http", target="http://x"
    )
    passed = ProbeResult(name="api", kind="http", target="http://x", verdict="pass")
    assert Finding.from_result(passed) is None
