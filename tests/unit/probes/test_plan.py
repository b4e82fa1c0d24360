"""The plan executor: parsing, every path, illegal transitions, replay from records."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probes.config import ConfigError, Probe, parse_config
from probes.plan import (
    EVENTS,
    PLAN_STATES,
    STEP_STATES,
    STEP_TRANSITIONS,
    Event,
    Finished,
    IllegalTransition,
    Plan,
    PlanMachine,
    PlanReplayError,
    RunCommand,
    RunPostProbes,
    RunPreProbes,
    RunRollback,
    StartStep,
    Step,
    TransitionRecord,
    WaitForAgent,
)
from protocol.errors import LocalError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "plans.md"


def plan_of(*steps: Step, name: str = "p") -> Plan:
    return Plan(name=name, steps=steps)


def drive(machine: PlanMachine, outcomes: dict[str, list[str]]) -> list[TransitionRecord]:
    """Run ``machine`` to the end; ``outcomes[action tag]`` pops the event kind to report
    (default: the first, passing outcome)."""
    records: list[TransitionRecord] = []
    for _ in range(100):
        action = machine.next_action()
        if isinstance(action, Finished):
            return records
        tag = type(action).__struct_config__.tag
        queue = outcomes.get(tag, [])
        kind = queue.pop(0) if queue else action.outcomes[0]
        records += machine.apply(Event(kind, action.step))
    raise AssertionError("plan did not finish")


def kinds(records: list[TransitionRecord]) -> list[tuple[str, str]]:
    return [(r.kind, r.step) for r in records]


PROBE = Probe(name="up", kind="http", params={"url": "http://127.0.0.1:1/"})


# ---------------------------------------------------------------- parsing

PLAN_TEXT = """
[plan]
name = "release"

[[probe]]
name = "site-up"
kind = "http"
url = "http://127.0.0.1:8080/"

[[step]]
id = "build"
run = "npm run build"
post = [{ kind = "build", dir = "dist" }]
on_post_fail = "retry"
retries = 2
rollback = "rm -rf dist"

[[step]]
id = "review"
expect = "approve the build in the review channel"
agent = "reviewer"

[[step]]
id = "deploy"
run = "./deploy.sh"
pre = ["site-up", "api"]
post = ["site-up"]
on_pre_fail = "skip"
"""


def test_parse_resolves_plan_and_config_probes():
    config = parse_config('[[probe]]\nname = "api"\nkind = "http"\nurl = "http://127.0.0.1:1/"\n')
    plan = Plan.parse(PLAN_TEXT, probes=config.probes_by_name())
    assert plan.name == "release" and [s.id for s in plan.steps] == ["build", "review", "deploy"]
    build, review, deploy = plan.steps
    assert build.post[0].name == "build.post.1" and build.post[0].params == {"dir": "dist"}
    assert (build.on_post_fail, build.retries, build.rollback) == ("retry", 2, "rm -rf dist")
    assert (review.expect, review.agent, review.run) == (
        "approve the build in the review channel", "reviewer", None)
    assert [p.name for p in deploy.pre] == ["site-up", "api"]
    assert deploy.pre[1] is config.probe("api")
    assert (deploy.on_pre_fail, deploy.on_post_fail, deploy.retries, deploy.extra_attempts) == ("skip", "escalate", None, 0)


def test_parse_without_catalogue_keeps_unknown_names():
    plan = Plan.parse(PLAN_TEXT)
    assert plan.steps[2].pre[1] == "api"
    assert isinstance(plan.steps[2].pre[0], Probe)


BAD_PLANS = [
    ("[[step]]\nid = 'a'\nrun = 'x'", "[plan] table"),
    ("[plan]\n", "[plan]: required key 'name'"),
    ("[plan]\nname = 'p'", "at least one [[step]]"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'", "exactly one of 'run'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\nexpect = 'y'", "exactly one of 'run'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nexpect = 'y'", "'expect' needs 'agent'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\nagent = 'bob'", "only an 'expect' step"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\nretires = 2", "unknown key 'retires'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\non_post_fail = 'pray'", "key 'on_post_fail'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\non_pre_fail = 'retry'", "key 'on_pre_fail'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\non_pre_fail = 'skip'", "'skip' needs 'pre'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\non_post_fail = 'rollback'", "first step"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\n[[step]]\nid = 'b'\nrun = 'y'\n"
     "on_post_fail = 'rollback'", "step 'a' has none"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\n[[step]]\nid = 'a'\nrun = 'y'", "earlier step"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\nretries = -1", "key 'retries'"),
    # A runaway: a billion failing attempts, each a ledger record, resumed after a restart.
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\nretries = 1000000000", "key 'retries'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\nretries = 101", "key 'retries'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\npre = 'up'", "key 'pre'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\npre = ['nope']", "'nope' names no [[probe]]"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\npre = [{kind = 'http'}]", "required key 'url'"),
    ("[plan]\nname = 'p'\n[[step]]\nid = 'a'\nrun = 'x'\npre = [{kind = 'build', dir = 'd', every = '1m'}]",
     "unknown key 'every'"),
    ("[plan]\nname = 'p'\nowner = 'me'\n[[step]]\nid = 'a'\nrun = 'x'", "unknown key 'owner'"),
    ("[plan]\nname = 'p'\n[[steps]]\nid = 'a'\nrun = 'x'", "at least one [[step]]"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD_PLANS)
def test_invalid_plans_are_refused(text, fragment):
    with pytest.raises(ConfigError) as info:
        Plan.parse(text, source="plans/PLAN.toml", probes={})
    message = str(info.value)
    assert message.startswith("plans/PLAN.toml:") and fragment in message, message


# ---------------------------------------------------------------- paths


def test_happy_path_with_every_phase():
    plan = plan_of(
        Step(id="a", run="make", pre=(PROBE,), post=(PROBE,)),
        Step(id="b", expect="merge the PR", agent="bob"),
    )
    machine = PlanMachine(plan)
    seen = []
    records = []
    while not isinstance(action := machine.next_action(), Finished):
        seen.append(action)
        records += machine.apply(Event(action.outcomes[0], action.step))
    assert seen == [
        StartStep(step="a"),
        RunPreProbes(step="a", probes=(PROBE,)),
        RunCommand(step="a", cmd="make", attempt=1),
        RunPostProbes(step="a", probes=(PROBE,)),
        StartStep(step="b"),
        WaitForAgent(step="b", agent="bob", expect="merge the PR", attempt=1),
    ]
    assert kinds(records) == [
        ("plan.step.started", "a"), ("plan.step.running", "a"), ("plan.step.ran", "a"),
        ("plan.step.passed", "a"), ("plan.step.started", "b"), ("plan.step.passed", "b"),
        ("plan.finished", "b"),
    ]
    assert machine.plan_state == "succeeded" and machine.current_step is None
    assert machine.next_action() == Finished(state="succeeded", reason="every step done or skipped")
    assert [machine.step_state(s) for s in ("a", "b")] == ["done", "done"]


def test_pre_fail_skip_moves_on():
    plan = plan_of(Step(id="a", run="x", pre=(PROBE,), on_pre_fail="skip"), Step(id="b", run="y"))
    machine = PlanMachine(plan)
    records = drive(machine, {"run_pre": ["pre_failed"]})
    assert kinds(records)[:3] == [("plan.step.started", "a"), ("plan.step.skipped", "a"),
                                  ("plan.step.started", "b")]
    assert machine.plan_state == "succeeded"
    assert machine.step_state("a") == "skipped"


def test_pre_fail_escalates_by_default():
    machine = PlanMachine(plan_of(Step(id="a", run="x", pre=(PROBE,)), Step(id="b", run="y")))
    records = drive(machine, {"run_pre": ["pre_failed"]})
    assert kinds(records)[-2:] == [("plan.step.escalated", "a"), ("plan.escalated", "a")]
    assert machine.plan_state == "escalated" and machine.step_state("b") == "pending"
    assert "pre-probes of step 'a' failed" in machine.state.reason


def test_post_fail_retry_then_pass():
    machine = PlanMachine(plan_of(Step(id="a", run="x", post=(PROBE,), on_post_fail="retry", retries=2)))
    actions = []
    outcomes = ["post_failed", "post_failed", "post_passed"]
    while not isinstance(action := machine.next_action(), Finished):
        actions.append(action)
        kind = outcomes.pop(0) if isinstance(action, RunPostProbes) else action.outcomes[0]
        machine.apply(Event(kind, "a"))
    assert [a.attempt for a in actions if isinstance(a, RunCommand)] == [1, 2, 3]
    assert machine.plan_state == "succeeded"


def test_retry_exhausted_escalates():
    machine = PlanMachine(plan_of(Step(id="a", run="x", on_post_fail="retry", retries=1)))
    records = drive(machine, {"run": ["run_failed", "run_failed"]})
    assert kinds(records) == [
        ("plan.step.started", "a"), ("plan.step.retry", "a"),
        ("plan.step.escalated", "a"), ("plan.escalated", "a"),
    ]
    assert records[1].attempt == 2
    assert "1 retries exhausted" in machine.state.reason


def test_failed_command_escalates_by_default():
    machine = PlanMachine(plan_of(Step(id="a", run="x")))
    drive(machine, {"run": ["run_failed"]})
    assert machine.plan_state == "escalated"


def test_rollback_of_the_previous_step():
    plan = plan_of(
        Step(id="build", run="make", rollback="make clean"),
        Step(id="deploy", run="./deploy", post=(PROBE,), on_post_fail="rollback"),
        Step(id="announce", run="./announce"),
    )
    machine = PlanMachine(plan)
    actions = []
    records = []
    while not isinstance(action := machine.next_action(), Finished):
        actions.append(action)
        kind = "post_failed" if isinstance(action, RunPostProbes) else action.outcomes[0]
        records += machine.apply(Event(kind, action.step))
    assert actions[-1] == RunRollback(step="deploy", rollback_of="build", cmd="make clean")
    assert kinds(records)[-3:] == [("plan.step.rolling_back", "deploy"),
                                   ("plan.step.rolled_back", "deploy"), ("plan.failed", "deploy")]
    assert records[-2].rollback_of == "build"
    assert machine.plan_state == "failed"
    assert machine.state.steps[0].rolled_back_by == "deploy"
    assert machine.step_state("announce") == "pending"


def test_failed_rollback_escalates():
    plan = plan_of(Step(id="a", run="x", rollback="undo"), Step(id="b", run="y", on_post_fail="rollback"))
    machine = PlanMachine(plan)
    drive(machine, {"run": ["run_passed", "run_failed"], "rollback": ["rollback_failed"]})
    assert machine.plan_state == "escalated" and machine.step_state("b") == "escalated"
    assert "rolling back step 'a' failed" in machine.state.reason


def test_rollback_of_a_skipped_step_escalates_instead():
    plan = plan_of(
        Step(id="a", run="x", pre=(PROBE,), on_pre_fail="skip", rollback="undo"),
        Step(id="b", run="y", on_post_fail="rollback"),
    )
    machine = PlanMachine(plan)
    drive(machine, {"run_pre": ["pre_failed"], "run": ["run_failed"]})
    assert machine.plan_state == "escalated"
    assert "nothing safe to roll back" in machine.state.reason


# ---------------------------------------------------------------- illegal transitions


@pytest.mark.parametrize(
    "event",
    [
        Event("run_passed", "a"),  # not started yet
        Event("started", "b"),  # not the current step
        Event("finish", "a"),  # no such event
        Event("rollback_passed", "a"),
    ],
)
def test_illegal_events_raise_and_change_nothing(event):
    machine = PlanMachine(plan_of(Step(id="a", run="x"), Step(id="b", run="y")))
    before = machine.state
    with pytest.raises(IllegalTransition):
        machine.apply(event)
    assert machine.state == before and machine.next_action() == StartStep(step="a")


def test_events_after_the_end_are_illegal():
    machine = PlanMachine(plan_of(Step(id="a", run="x")))
    drive(machine, {})
    with pytest.raises(IllegalTransition, match="has ended"):
        machine.apply(Event("started", "a"))


@pytest.mark.parametrize(
    "steps",
    [
        (),
        (Step(id="a", run="x", on_post_fail="rollback"),),
        (Step(id="a", run="x"), Step(id="b", run="y", on_post_fail="rollback")),
        (Step(id="a"),),
        (Step(id="a", expect="do it"),),
        (Step(id="a", run="x"), Step(id="a", run="y")),
        (Step(id="a", run="x", retries=-1),),
    ],
)
def test_plans_built_in_code_are_checked_like_parsed_ones(steps):
    with pytest.raises(LocalError):
        PlanMachine(Plan(name="p", steps=steps))


def test_state_table_is_well_formed():
    for (state, event), targets in STEP_TRANSITIONS.items():
        assert state in STEP_STATES and event in EVENTS and targets
        assert set(targets) <= set(STEP_STATES)
    assert set(PLAN_STATES) == {"running", "succeeded", "failed", "escalated"}


# ---------------------------------------------------------------- replay


def test_replay_resumes_an_interrupted_plan():
    plan = plan_of(Step(id="a", run="x", post=(PROBE,)), Step(id="b", run="y"))
    machine = PlanMachine(plan)
    records = []
    for kind, step in [("started", "a"), ("run_passed", "a"), ("post_passed", "a"), ("started", "b")]:
        records += machine.apply(Event(kind, step, detail=f"{kind} ok"))
    # Through the ledger and back.
    stored = [msgspec.json.encode(r) for r in records]
    loaded = [msgspec.json.decode(row, type=TransitionRecord) for row in stored]
    resumed = PlanMachine.replay(plan, loaded)
    assert resumed.state == machine.state
    assert resumed.next_action() == RunCommand(step="b", cmd="y", attempt=1)


def test_replay_accepts_a_ledger_cut_inside_the_last_event():
    machine = PlanMachine(plan_of(Step(id="a", run="x")))
    records = drive(machine, {})
    assert records[-1].kind == "plan.finished"
    assert PlanMachine.replay(machine.plan, records[:-1]).state == machine.state


def test_replay_refuses_records_of_another_plan_or_history():
    plan = plan_of(Step(id="a", run="x"), name="one")
    machine = PlanMachine(plan)
    records = machine.apply(Event("started", "a"))
    with pytest.raises(PlanReplayError, match="belongs to plan"):
        PlanMachine.replay(plan_of(Step(id="a", run="x"), name="two"), records)
    forged = [msgspec.structs.replace(records[0], to_state="done")]
    with pytest.raises(PlanReplayError, match="differ"):
        PlanMachine.replay(plan, forged)
    impossible = [msgspec.structs.replace(records[0], event="post_passed")]
    with pytest.raises(PlanReplayError, match="cannot be replayed"):
        PlanMachine.replay(plan, impossible)


@st.composite
def plans(draw) -> Plan:
    count = draw(st.integers(min_value=1, max_value=4))
    steps: list[Step] = []
    for index in range(count):
        has_pre = draw(st.booleans())
        choices = ["retry", "escalate"] + (["rollback"] if steps and steps[-1].rollback else [])
        expect = draw(st.booleans())
        steps.append(
            Step(
                id=f"s{index}",
                run=None if expect else f"cmd{index}",
                expect=f"do {index}" if expect else None,
                agent="bob" if expect else None,
                pre=(PROBE,) if has_pre else (),
                post=(PROBE,) if draw(st.booleans()) else (),
                on_pre_fail=draw(st.sampled_from(["skip", "escalate"])) if has_pre else "escalate",
                on_post_fail=draw(st.sampled_from(choices)),
                retries=draw(st.integers(min_value=0, max_value=2)),
                rollback=f"undo{index}" if draw(st.booleans()) else None,
            )
        )
    return Plan(name="random", steps=tuple(steps))


@given(plans(), st.data())
@settings(max_examples=300, deadline=None)
def test_replaying_the_records_of_any_event_sequence_gives_the_same_state(plan, data):
    machine = PlanMachine(plan)
    records: list[TransitionRecord] = []
    step_ids = [s.id for s in plan.steps]
    for _ in range(data.draw(st.integers(min_value=0, max_value=40))):
        action = machine.next_action()
        if data.draw(st.booleans()) and action.outcomes:
            event = Event(data.draw(st.sampled_from(action.outcomes)), action.step,
                          data.draw(st.sampled_from(["", "exit 1"])))
        else:  # anything at all: mostly illegal, which must change nothing
            event = Event(data.draw(st.sampled_from(EVENTS)), data.draw(st.sampled_from(step_ids)))
        before = machine.state
        try:
            records += machine.apply(event)
        except IllegalTransition:
            assert machine.state == before
        # After every prefix of whole events, replay agrees.
        assert PlanMachine.replay(plan, records).state == machine.state
    replayed = PlanMachine.replay(plan, records)
    assert replayed.state == machine.state
    assert replayed.next_action() == machine.next_action()


# ---------------------------------------------------------------- docs


def test_docs_example_parses_and_documents_the_table():
    text = DOCS.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "docs/plans.md has no ```toml example"
    for block in blocks:
        Plan.parse(block, source="docs/plans.md")
    for (state, event), targets in STEP_TRANSITIONS.items():
        row = re.search(rf"^\|\s*`{state}`\s*\|\s*`{event}`\s*\|(.*)$", text, flags=re.MULTILINE)
        assert row, f"docs/plans.md has no table row for ({state}, {event})"
        for target in targets:
            assert f"`{target}`" in row.group(1), (state, event, target)


def test_retries_come_before_a_rollback():
    plan = plan_of(Step(id="a", run="x", rollback="undo"), Step(id="b", run="y", on_post_fail="rollback", retries=2))
    machine = PlanMachine(plan)
    records = drive(machine, {"run": ["run_passed", "run_failed", "run_failed", "run_failed"], "rollback": ["rollback_passed"]})
    assert [k for k, step in kinds(records) if step == "b"] == [
        "plan.step.started", "plan.step.retry", "plan.step.retry", "plan.step.rolling_back", "plan.step.rolled_back", "plan.failed"
    ]
    assert machine.plan_state == "failed" and machine.state.steps[1].attempt == 3
    assert PlanMachine.replay(plan, records).state == machine.state


def test_retries_come_before_an_escalation_too_and_default_to_none():
    assert Step(id="s", run="x").extra_attempts == 0 and Step(id="s", run="x", on_post_fail="retry").extra_attempts == 1
    machine = PlanMachine(plan_of(Step(id="a", run="x", retries=1)))
    records = drive(machine, {"run": ["run_failed", "run_failed"]})
    assert [k for k, _ in kinds(records)] == ["plan.step.started", "plan.step.retry", "plan.step.escalated", "plan.escalated"]
    assert machine.state.reason == "action of step 'a' failed after 1 retries"


def test_a_plans_own_http_probe_reaches_only_what_lockstep_toml_allows():
    text = """
[plan]
name = "deploy"

[[probe]]
name = "site"
kind = "http"
url = "https://app.example.com/health"

[[step]]
id = "ship"
run = "true"
post = ["site"]
"""
    closed = parse_config('').http  # no [http] allow: loopback only
    with pytest.raises(ConfigError, match=r"PLAN\.toml: \[\[probe\]\] #1 key 'url': .*app\.example\.com"):
        Plan.parse(text, "PLAN.toml", {}, closed)
    listed = parse_config('[http]\nallow = ["https://app.example.com"]\n').http
    assert Plan.parse(text, "PLAN.toml", {}, listed).steps[0].post[0].name == "site"
    assert Plan.parse(text, "PLAN.toml").name == "deploy"  # no [http] given: checked where it runs
