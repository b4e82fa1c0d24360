"""Where plans stand, rebuilt from the ledger alone (the coordinator may be down)."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger import LedgerReader
from probes import plan as plans
from probes.plan import (
    PLAN_END_KINDS,
    PLAN_LEDGER_KINDS,
    PLAN_STOPPED,
    PLAN_STOPPED_KIND,
)


def _probe_names(probes) -> str:
    return ", ".join(p if isinstance(p, str) else p.name for p in probes)


def waiting_on(plan: plans.Plan, action: plans.Action) -> dict[str, str] | None:
    """What a running plan's current step waits for (``what``) and how that is
    satisfied (``how``), from the action the machine asks for next."""
    step = plan.step(action.step) if hasattr(action, "step") else None
    match action:
        case plans.WaitForAgent(agent=agent, expect=expect, attempt=attempt):
            return {
                "what": f"agent {agent} to {expect}" + (f" (attempt {attempt})" if attempt > 1 else ""),
                "how": f"`lockstep done --agent {agent}` once it is done: the step passes when {agent}'s done gate "
                "passes (a verify run after its last write)",
            }
        case plans.RunCommand(cmd=cmd, attempt=attempt):
            return {
                "what": f"its command `{cmd}`" + (f" (attempt {attempt})" if attempt > 1 else ""),
                "how": "nothing to do: the coordinator runs it; exit 0 passes",
            }
        case plans.RunPreProbes(probes=probes):
            on_fail = step.on_pre_fail if step is not None else "escalate"
            return {"what": f"its pre-probes {_probe_names(probes)}", "how": f"nothing to do: they run now; if one fails the step will {on_fail}"}
        case plans.RunPostProbes(probes=probes):
            on_fail = step.on_post_fail if step is not None else "escalate"
            return {"what": f"its post-probes {_probe_names(probes)}", "how": f"nothing to do: they run now; if one fails the step will {on_fail}"}
        case plans.RunRollback(rollback_of=of, cmd=cmd):
            return {"what": f"the rollback of step {of}: `{cmd}`", "how": "nothing to do: the coordinator runs it"}
        case plans.StartStep():
            return {"what": "its start", "how": "nothing to do: the coordinator starts it"}
    return None


def plan_summaries(reader: LedgerReader, only_job: str | None = None) -> list[dict[str, Any]]:
    started: dict[str, dict] = {}
    records: dict[str, list[plans.TransitionRecord]] = {}
    ended: dict[str, str] = {}
    stopped: dict[str, dict] = {}  # job -> its plan.stopped record (not a transition)
    for event in reader.events(kinds=["job.started", *PLAN_LEDGER_KINDS, PLAN_STOPPED_KIND]):
        job = event.data.get("job")
        if only_job is not None and job != only_job:
            continue
        if event.kind == "job.started":
            if event.data.get("kind") == "plan":
                started[job] = event.data
            continue
        if event.kind == PLAN_STOPPED_KIND:
            stopped.setdefault(job, event.data)
            continue
        fields = {k: v for k, v in event.data.items() if k != "job"}
        records.setdefault(job, []).append(msgspec.convert(fields, plans.TransitionRecord))
        if event.kind in PLAN_END_KINDS:
            ended[job] = event.data.get("detail", "")
    summaries = []
    for job, data in started.items():
        try:
            plan = plans.Plan.parse(data["plan"], data.get("source") or plans.PLAN_FILENAME)
            machine = plans.PlanMachine.replay(plan, records.get(job, []))
        except (plans.PlanReplayError, plans.ConfigError) as exc:
            summaries.append({"job": job, "name": "?", "state": "unreadable", "source": data.get("source", ""), "reason": str(exc), "steps": []})
            continue
        details: dict[str, str] = {}
        for record in records.get(job, []):
            if record.detail:
                details[record.step] = record.detail
        waits = None
        state, reason = machine.plan_state, machine.state.reason
        current = machine.current_step.id if machine.current_step else None
        steps = [{"id": s.id, "state": s.state, "attempt": s.attempt, "detail": details.get(s.id, "")} for s in machine.state.steps]
        stop = stopped.get(job)
        if stop is not None and state == plans.PLAN_RUNNING:  # stopped where it stood: nothing of it runs
            state = PLAN_STOPPED
            at = f" at step {stop['step']!r}" if stop.get("step") else ""
            reason = f"stopped by {stop.get('by') or 'someone'}{at}: {stop.get('reason') or 'no reason given'}"
            for step in steps:  # the step it interrupted (a step not begun stays pending)
                if step["id"] == current and step["state"] not in (plans.PENDING, *plans.STEP_TERMINAL):
                    step["state"] = PLAN_STOPPED
            current = None
        elif state == plans.PLAN_RUNNING and job not in ended:
            waits = waiting_on(plan, machine.next_action())
        summaries.append(
            {
                "job": job,
                "name": plan.name,
                "source": data.get("source", ""),
                "state": state,
                "reason": reason,
                "current": current,
                "waits_for": waits,
                "steps": steps,
            }
        )
    return summaries
