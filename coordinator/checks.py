"""The core's part in checks and gates: jobs, the verify loop's bookkeeping, ``done``.

``Gates`` is a component the core holds (``core.gates``); what it uses of the core is
what its constructor takes: the settings, the call's ``Outbox``, the registry (read
through a function: a restart replaces it), ``record`` (apply to the registry and
append), ``publish`` and ``session`` (a live session, its lease renewed).  The probes
themselves run in the shell's job runner (jobs.py), which reports back through the
core's ``job_result``, ``job_finished``, ``decide_rules`` and ``note``, so every result
is a ledger record before anyone hears of it.  The repair-loop count, rule
retry counts (``rule.decided``), edit batches and the ``done`` gate live in the registry
(registry.py), rebuilt from the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from ledger import records as rec
from probes.model import KINDS as PROBE_KINDS
from probes.rules import Finding, Response, RuleTable
from protocol import messages as m
from protocol.errors import PeerError

from .effects import Outbox, Send, StartJob
from .registry import Agent, Registry
from .settings import Settings

EDIT_BATCH_QUIET = 2.0  # seconds without a write that end an agent's edit batch


class Verdict(msgspec.Struct, frozen=True):
    """A gate's answer: ``verdict`` and the one line that says why."""

    verdict: str
    reason: str


class Gates:
    def __init__(
        self,
        settings: Settings,
        out: Outbox,
        *,
        registry: Callable[[], Registry],
        record: Callable[[rec.Record], rec.Record],
        publish: Callable[[str, str | None, dict[str, Any]], None],
        session: Callable[[str, float], Agent],
    ) -> None:
        self.settings = settings
        self._out = out
        self._registry = registry
        self._record = record
        self._publish = publish
        self._session = session

    @property
    def registry(self) -> Registry:
        return self._registry()

    def _reply(self, peer: Any, message: m.Reply) -> None:
        self._out.append(Send(peer, message))

    def _optional_session(self, session: str | None, now: float) -> Agent | None:
        return None if session is None else self._session(session, now)

    def _open_job(self, kind: str, agent: Agent | None, request: m.Request, **fields: Any) -> str:
        job = f"{self.registry.epoch}.{self.registry.job_counter + 1}"
        name = agent.name if agent else None
        self._record(rec.JobStarted(agent=name, session=agent.session if agent else None, job=job, kind=kind, **fields))
        self._publish("job.started", name, {"job": job, "kind": kind})
        self._out.append(StartJob(job=job, kind=kind, agent=name, request=request))
        return job

    def on_check(self, peer, msg: m.Check, now: float) -> None:
        agent = self._optional_session(msg.session, now)
        if msg.probe.kind not in PROBE_KINDS:
            raise PeerError("bad_request", f"unknown probe kind {msg.probe.kind!r}: use one of {', '.join(PROBE_KINDS)}")
        name = msg.probe.name or msg.probe.kind
        job = self._open_job("check", agent, msg, probe=msg.probe, cwd=msg.cwd)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="check", checks=[name]))

    def on_verify(self, peer, msg: m.Verify, now: float) -> None:
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

    def on_done(self, peer, msg: m.Done, now: float) -> None:
        agent = self._session(msg.session, now)
        done = self.done_gate(agent.name)
        verdict, reason = done.verdict, done.reason
        self._record(rec.DoneDecided(agent=agent.name, session=agent.session, verdict=verdict, reason=reason))
        self._publish("done.decided", agent.name, {"verdict": verdict, "reason": reason})
        self._reply(peer, m.Gate(req=msg.req, subject="done", verdict=verdict, reason=reason, agent=agent.name))

    def done_gate(self, name: str) -> Verdict:
        """Pass only if a verify run that started after the agent's last write passed."""
        reg = self.registry
        if self.settings.verify_policy == "off":
            return Verdict("pass", "verify policy is off: done is not gated")
        if name in reg.blocked:
            return Verdict("block", f"{name} is blocked by a rule: {reg.blocked[name]}")
        last_write = reg.last_write.get(name)
        last = reg.last_verify.get(name)
        if last_write is None and (last is None or last.passed):
            return Verdict("pass", f"{name} wrote nothing: there is nothing to verify")
        if last is None or last.mark < last_write:
            return Verdict("block", "no verify run since your last write: run `lockstep verify` first")
        if not last.passed:
            return Verdict("block", f"the last verify run (job {last.job}) failed: {', '.join(last.failed) or 'see its report'}")
        return Verdict("pass", f"verify run {last.job} passed after your last write")

    def on_plan_run(self, peer, msg: m.PlanRun, now: float) -> None:
        agent = self._optional_session(msg.session, now)
        job = self._open_job("plan", agent, msg, source=msg.source, cwd=msg.cwd, plan=msg.plan)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="plan"))

    def verify_edit_batches(self, now: float) -> None:
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
            self.on_verify(None, m.Verify(session=live.session, cwd=live.worktree), now)

    # -- what the shell's job runner reports back (each one a ledger record first)

    def job_result(self, job: str, kind: str, agent: str | None, result: dict[str, Any]) -> None:
        """One probe's result within a job."""
        result_type = rec.VerifyResult if kind == "verify" else rec.ProbeResult
        self._record(result_type(agent=agent, job=job, **result))
        self._publish("job.progress", agent, {"job": job, "kind": kind, "result": result})

    def job_finished(self, job: str, kind: str, gate: m.Gate) -> None:
        data = {"job": job, "kind": kind, "verdict": gate.verdict, "reason": gate.reason, "responses": gate.responses}
        if kind == "verify":  # the done gate and the repair loop read this one
            failed = [r.get("name", "?") for r in gate.results if r.get("verdict") != "pass"]
            self._record(rec.VerifyFinished(agent=gate.agent, **data, passed=gate.verdict == "pass", failed=failed))
        else:
            self._record(rec.JobFinished(agent=gate.agent, **data))
        self._publish("job.finished", gate.agent, {**data, "gate": msgspec.to_builtins(gate)})

    def decide_rules(self, job: str, findings: list[Finding], rules: RuleTable, now: float) -> list[Response]:
        """What the rule table answers to a job's findings.  Each decision is a
        ``rule.decided`` record before it is carried out; retry bounds count those (the
        registry's ``repair``), so a restart continues the count."""
        responses, _ = rules.decide(findings, self.registry.repair, now)
        for r in responses:
            self._record(
                rec.RuleDecided(agent=r.agent, job=job, action=r.action, params=r.params, reason=r.reason, finding=r.finding, probes=list(r.probes))
            )
        return responses

    def note(self, record: rec.Record) -> None:
        """Record and publish something a job did (a rule's response, a plan transition)."""
        self._record(record)
        self._publish(record.KIND, record.agent, rec.data_of(record))
