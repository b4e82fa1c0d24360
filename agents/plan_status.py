"""Where plans stand, rebuilt from the ledger alone (the coordinator may be down)."""

from __future__ import annotations

from typing import Any

import msgspec

from ledger import LedgerReader
from probes import plan as plans
from probes.plan import PLAN_END_KINDS, PLAN_LEDGER_KINDS


def plan_summaries(reader: LedgerReader, only_job: str | None = None) -> list[dict[str, Any]]:
    started: dict[str, dict] = {}
    records: dict[str, list[plans.TransitionRecord]] = {}
    ended: dict[str, str] = {}
    for event in reader.events(kinds=["job.started", *PLAN_LEDGER_KINDS]):
        job = event.data.get("job")
        if only_job is not None and job != only_job:
            continue
        if event.kind == "job.started":
            if event.data.get("kind") == "plan":
                started[job] = event.data
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
        summaries.append(
            {
                "job": job,
                "name": plan.name,
                "source": data.get("source", ""),
                "state": machine.plan_state,
                "reason": machine.state.reason,
                "current": machine.current_step.id if machine.current_step else None,
                "steps": [
                    {"id": s.id, "state": s.state, "attempt": s.attempt, "detail": details.get(s.id, "")}
                    for s in machine.state.steps
                ],
            }
        )
    return summaries
