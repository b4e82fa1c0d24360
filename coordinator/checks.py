"""The core's part in checks and gates: jobs, the verify loop's bookkeeping, ``done``.

Mixed into ``Core`` (core.py), whose plumbing it uses (``_record``, ``_publish``,
``_reply``, ``_session``).  The probes themselves run in the shell's job runner
(jobs.py), which reports back through ``job_result``, ``job_finished`` and ``note``, so
every result is a ledger record before anyone hears of it.  The repair-loop count, rule
retry counts (``rule.decided``), edit batches and the ``done`` gate live in the registry
(registry.py), rebuilt from the ledger.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ledger import records as rec
from probes.model import KINDS as PROBE_KINDS
from probes.rules import Finding, Response, RuleTable
from protocol import messages as m
from protocol.errors import PeerError

from .effects import Effect, StartJob
from .registry import Agent

EDIT_BATCH_QUIET = 2.0  # seconds without a write that end an agent's edit batch


class CheckHandlers:

    def _optional_session(self, session: str | None, now: float) -> Agent | None:
        return None if session is None else self._session(session, now)

    def _open_job(self, kind: str, agent: Agent | None, request: m.Request, **fields: Any) -> str:
        job = f"{self.registry.epoch}.{self.registry.job_counter + 1}"
        name = agent.name if agent else None
        self._record(rec.JobStarted(agent=name, session=agent.session if agent else None, job=job, kind=kind, **fields))
        self._publish("job.started", name, {"job": job, "kind": kind})
        self._out.append(StartJob(job=job, kind=kind, agent=name, request=request))
        return job

    def _on_check(self, peer, msg: m.Check, now: float) -> None:
        agent = self._optional_session(msg.session, now)
        if msg.probe.kind not in PROBE_KINDS:
            raise PeerError("bad_request", f"unknown probe kind {msg.probe.kind!r}: use one of {', '.join(PROBE_KINDS)}")
        name = msg.probe.name or msg.probe.kind
        job = self._open_job("check", agent, msg, probe=msg.probe, cwd=msg.cwd)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="check", checks=[name]))

    def _on_verify(self, peer, msg: m.Verify, now: float) -> None:
        agent = self._optional_session(msg.session, now)
        reg = self.registry
        if agent is not None and msg.new_turn:
            self._record(rec.TurnStarted(agent=agent.name, session=agent.session))
        if agent is not None and reg.failing_rounds.get(agent.name, 0) >= self.settings.max_repair_loops:
            last = reg.last_verify.get(agent.name)
            failed = ", ".join(last.failed) if last else "?"
            reason = (
                f"{agent.name} has had {reg.failing_rounds[agent.name]} failing verify rounds this turn "
                f"(max_repair_loops = {self.settings.max_repair_loops}); not re-running. "
                f"The failure report of job {last.job if last else '?'} stands: {failed} failed. "
                "Fix the failures, then start a new turn: `lockstep verify --new-turn`"
            )
            self._record(rec.VerifyRefused(agent=agent.name, session=agent.session, reason=reason))
            self._publish("verify.refused", agent.name, {"reason": reason})
            self._reply(peer, m.Gate(req=msg.req, subject="verify", verdict="escalate", reason=reason, agent=agent.name, job=last.job if last else ""))
            return
        job = self._open_job("verify", agent, msg, cwd=msg.cwd)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="verify"))

    def _on_done(self, peer, msg: m.Done, now: float) -> None:
        agent = self._session(msg.session, now)
        verdict, reason = self._done_gate(agent.name)
        self._record(rec.DoneDecided(agent=agent.name, session=agent.session, verdict=verdict, reason=reason))
        self._publish("done.decided", agent.name, {"verdict": verdict, "reason": reason})
        self._reply(peer, m.Gate(req=msg.req, subject="done", verdict=verdict, reason=reason, agent=agent.name))

    def _done_gate(self, name: str) -> tuple[str, str]:
        """Pass only if a verify run that started after the agent's last write passed."""
        reg = self.registry
        if self.settings.verify_policy == "off":
            return "pass", "verify policy is off: done is not gated"
        if name in reg.blocked:
            return "block", f"{name} is blocked by a rule: {reg.blocked[name]}"
        last_write = reg.last_write.get(name)
        last = reg.last_verify.get(name)
        if last_write is None and (last is None or last.passed):
            return "pass", f"{name} wrote nothing: there is nothing to verify"
        if last is None or last.mark < last_write:
            return "block", "no verify run since your last write: run `lockstep verify` first"
        if not last.passed:
            return "block", f"the last verify run (job {last.job}) failed: {', '.join(last.failed) or 'see its report'}"
        return "pass", f"verify run {last.job} passed after your last write"

    def _on_plan_run(self, peer, msg: m.PlanRun, now: float) -> None:
        agent = self._optional_session(msg.session, now)
        job = self._open_job("plan", agent, msg, source=msg.source, cwd=msg.cwd, plan=msg.plan)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="plan"))

    def _verify_edit_batches(self, now: float) -> None:
        """``verify_policy = "after-each-edit-batch"``: an agent that has made no write for
        ``EDIT_BATCH_QUIET`` seconds has ended its batch; verify it as if it had asked (so
        the run counts for its gate).  The batch is the registry's (from the ledger's
        intents), so a restart still verifies it."""
        reg = self.registry
        for name, last_write in list(reg.edit_batches.items()):
            if now < last_write + EDIT_BATCH_QUIET:
                continue
            live = reg.live_agent(name)
            if live is None:
                del reg.edit_batches[name]  # upkeep, as for holds: nobody left to verify for
                continue
            self._on_verify(None, m.Verify(session=live.session, cwd=live.worktree), now)

    # -- what the shell's job runner reports back (each one a ledger record first)

    def job_result(self, job: str, kind: str, agent: str | None, result: dict[str, Any], now: float) -> list[Effect]:
        """One probe's result within a job."""
        self._advance(now)
        result_type = rec.VerifyResult if kind == "verify" else rec.ProbeResult
        self._record(result_type(agent=agent, job=job, **result))
        self._publish("job.progress", agent, {"job": job, "kind": kind, "result": result})
        return self._flush()

    def job_finished(self, job: str, kind: str, gate: m.Gate, now: float) -> list[Effect]:
        self._advance(now)
        data = {"job": job, "kind": kind, "verdict": gate.verdict, "reason": gate.reason, "responses": gate.responses}
        if kind == "verify":  # the done gate and the repair loop read this one
            failed = [r.get("name", "?") for r in gate.results if r.get("verdict") != "pass"]
            self._record(rec.VerifyFinished(agent=gate.agent, **data, passed=gate.verdict == "pass", failed=failed))
        else:
            self._record(rec.JobFinished(agent=gate.agent, **data))
        self._publish("job.finished", gate.agent, {**data, "gate": msgspec.to_builtins(gate)})
        return self._flush()

    def decide_rules(self, job: str, findings: list[Finding], rules: RuleTable, now: float) -> tuple[list[Response], list[Effect]]:
        """What the rule table answers to a job's findings.  Each decision is a
        ``rule.decided`` record before it is carried out; retry bounds count those (the
        registry's ``repair``), so a restart continues the count."""
        self._advance(now)
        responses, _ = rules.decide(findings, self.registry.repair, now)
        for r in responses:
            self._record(
                rec.RuleDecided(agent=r.agent, job=job, action=r.action, params=r.params, reason=r.reason, finding=r.finding, probes=list(r.probes))
            )
        return responses, self._flush()

    def note(self, record: rec.Record, now: float) -> list[Effect]:
        """Record and publish something a job did (a rule's response, a plan transition)."""
        self._advance(now)
        self._record(record)
        self._publish(record.KIND, record.agent, rec.data_of(record))
        return self._flush()
