"""`plan status` says what a running step waits for and how it goes on, for every action."""

from __future__ import annotations

from agents.plan_status import waiting_on
from probes import plan as plans

PLAN = plans.Plan.parse(
    '[plan]\nname = "p"\n\n'
    '[[step]]\nid = "a"\nrun = "make"\nrollback = "undo"\npost = [{ kind = "command", cmd = "true" }]\non_post_fail = "retry"\n\n'
    '[[step]]\nid = "b"\nexpect = "review it"\nagent = "rev"\non_post_fail = "rollback"\n',
    "PLAN.toml",
)


def test_an_expect_step_waits_for_its_agent_and_names_the_done_command():
    waits = waiting_on(PLAN, plans.WaitForAgent(step="b", agent="rev", expect="review it", attempt=1))
    assert waits["what"] == "agent rev to review it"
    assert "`lockstep done --agent rev`" in waits["how"]


def test_every_other_action_says_the_coordinator_carries_it_out():
    actions = [
        plans.StartStep(step="a"),
        plans.RunCommand(step="a", cmd="make", attempt=2),
        plans.RunPreProbes(step="a", probes=("up",)),
        plans.RunPostProbes(step="a", probes=("up",)),
        plans.RunRollback(step="b", rollback_of="a", cmd="undo"),
    ]
    for action in actions:
        waits = waiting_on(PLAN, action)
        assert waits["what"] and waits["how"].startswith("nothing to do"), action
    assert "attempt 2" in waiting_on(PLAN, actions[1])["what"]
    assert "retry" in waiting_on(PLAN, actions[3])["how"]


def test_a_finished_plan_waits_for_nothing():
    assert waiting_on(PLAN, plans.Finished(state="succeeded", reason="")) is None
