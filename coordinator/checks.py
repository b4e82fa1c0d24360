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

import fnmatch
from collections.abc import Callable
from typing import Any

import msgspec

from ledger import records as rec
from probes.model import KINDS as PROBE_KINDS
from probes.model import MAX_TIMEOUT, MIN_TIMEOUT
from probes.rules import Finding, Response, RuleTable
from protocol import messages as m
from protocol.errors import PeerError

from .effects import Outbox, Send, StartJob
from .registry import Agent, HandoffOutcome, Registry
from .settings import Settings

EDIT_BATCH_QUIET = 2.0  # seconds without a write that end an agent's edit batch
HANDOFF_FACTS_SHOWN = 5  # false facts a refused done names (the rest are counted)


def _handoff_failure(last: HandoffOutcome, threshold: int) -> str:
    """Why a handoff check did not pass: its false facts (the first few), else its gaps."""
    false = last.false_facts
    if false:
        more = f"; and {len(false) - HANDOFF_FACTS_SHOWN} more" if len(false) > HANDOFF_FACTS_SHOWN else ""
        why = f"{len(false)} false fact{'s' if len(false) != 1 else ''}: " + "; ".join(false[:HANDOFF_FACTS_SHOWN]) + more
    else:
        gaps = last.missing[:HANDOFF_FACTS_SHOWN]
        why = f"scores {last.score}, below the threshold {threshold}" + (f": {'; '.join(gaps)}" if gaps else "")
    return f"(job {last.job}, score {last.score}, threshold {threshold}): {why}"


def _names_note(target: str, note: str) -> bool:
    """``target`` (the absolute path a check read) is the note ``note`` names, relative
    to some worktree: it ends with those path segments."""
    wanted = [part for part in note.replace("\\", "/").split("/") if part not in ("", ".")]
    parts = target.replace("\\", "/").split("/")
    return bool(wanted) and parts[-len(wanted):] == wanted


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
        # ``[[trigger]]``s as (command glob, probe name), set by the shell from lockstep.toml
        self.triggers: tuple[tuple[str, str], ...] = ()

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
        timeout = msg.probe.timeout
        if timeout is not None and not MIN_TIMEOUT <= timeout <= MAX_TIMEOUT:  # (NaN too) refused before a job opens
            raise PeerError("bad_request", f"timeout must be between {MIN_TIMEOUT:g} s and {MAX_TIMEOUT:g} s (a day), not {timeout:g}")
        name = msg.probe.name or msg.probe.kind
        job = self._open_job("check", agent, msg, probe=msg.probe, cwd=msg.cwd)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="check", checks=[name]))

    def on_ran(self, peer, msg: m.Ran, now: float) -> None:
        """An agent's shell command: the probes of the triggers it matches run as a job
        (kind ``trigger``); none matching is an ``ok`` and no record.  A session that
        ended counts too: ``run`` reports its command once it exited, and the agent's
        session may have ended with it (its pid watched)."""
        agent = self.registry.sessions.get(msg.session)
        if agent is None or agent.live:
            agent = self._session(msg.session, now)  # unknown: the usual error; live: seen now
        line = " ".join(msg.command.split())
        probes = list(dict.fromkeys(probe for pattern, probe in self.triggers if fnmatch.fnmatchcase(line, pattern)))
        if not probes:
            self._reply(peer, m.Ok(req=msg.req, message="no [[trigger]] matches this command"))
            return
        job = self._open_job("trigger", agent, msg, cwd=msg.cwd or agent.worktree)
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="trigger", checks=probes))

    def on_turn(self, peer, msg: m.TurnStart, now: float) -> None:
        """A new turn (a user prompt): the repair-loop count starts again."""
        agent = self._session(msg.session, now)
        self._record(rec.TurnStarted(agent=agent.name, session=agent.session, tree=msg.tree or msgspec.UNSET))
        self._reply(peer, m.Ok(req=msg.req, message=f"{agent.name} starts a new turn"))

    def on_verify(self, peer, msg: m.Verify, now: float) -> None:
        agent = self._optional_session(msg.session, now)
        reg = self.registry
        if msg.turn_end and agent is None:
            raise PeerError("bad_request", "the turn-end gate needs the agent's session")
        if agent is not None and msg.new_turn:
            self._record(rec.TurnStarted(agent=agent.name, session=agent.session))
        if agent is not None and msg.turn_end:
            if self._turn_end(peer, msg, agent):
                return
        elif agent is not None and (job := reg.passed_on(agent.name, msg.tree)) is not None:
            self._reuse(peer, msg, agent, job)
            return
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

    def _reuse(self, peer, msg: m.Verify, agent: Agent, job: str) -> None:
        """Verify on content that already passed: the earlier run's pass stands, recorded
        as a run of its own (it counts for the done gate like any run started now)."""
        reused = f"{self.registry.epoch}.{self.registry.job_counter + 1}"
        reason = f"verify run {job} passed on this same content (tree {msg.tree[:12]}): answered from the ledger, nothing re-run"
        self._record(rec.JobStarted(agent=agent.name, session=agent.session, job=reused, kind="verify", cwd=msg.cwd))
        self._record(rec.VerifyFinished(agent=agent.name, job=reused, kind="verify", verdict="pass", reason=reason, passed=True, tree=msg.tree, reused=job))
        gate = m.Gate(req=msg.req, subject="verify", verdict="pass", reason=reason, job=reused, agent=agent.name, tree=msg.tree)
        self._publish("job.finished", agent.name, {"job": reused, "kind": "verify", "verdict": "pass", "reason": reason, "responses": [], "gate": msgspec.to_builtins(gate)})
        self._reply(peer, gate)

    def _turn_end(self, peer, msg: m.Verify, agent: Agent) -> bool:
        """The turn-end gate (a Stop hook): answer at once when no run is needed (and
        say so in the ledger), or join a verify run of the agent already running.
        False: a run must start."""
        reg = self.registry
        decided = self.stop_gate(agent.name, msg.tree)
        if decided is not None:
            verdict, reason, job, failed = decided
            self._record(rec.StopDecided(agent=agent.name, session=agent.session, verdict=verdict, reason=reason, tree=msg.tree, job=job, failed=failed))
            self._publish("stop.decided", agent.name, {"verdict": verdict, "reason": reason, "tree": msg.tree, "job": job, "failed": failed})
            self._reply(peer, m.Gate(req=msg.req, subject="stop", verdict=verdict, reason=reason, agent=agent.name, job=job, tree=msg.tree))
            return True
        running = reg.running_verify(agent.name)
        if running is not None:  # wait for the run under way rather than start a second
            self._reply(peer, m.Accepted(req=msg.req, job=running, kind="verify"))
            return True
        return False

    def stop_gate(self, name: str, tree: str) -> tuple[str, str, str, list[str]] | None:
        """``(verdict, reason, job, failed)`` when the turn may end without a run; None
        when verify must run (or a running one be waited for)."""
        reg, settings = self.registry, self.settings
        if not settings.turn_gate:
            return "allow", "the turn-end gate is off ([verify] turn_gate = false)", "", []
        if settings.verify_policy == "off":
            return "allow", "verify policy is off: turns end unchecked", "", []
        if name not in reg.blocked or reg.block_lifts.get(name) == ["handoff"]:  # a handoff block is not verify's to lift
            if (job := reg.passed_on(name, tree)) is not None:
                return "allow", f"verify run {job} passed on this content", job, []
            if tree and reg.turn_trees.get(name) == tree:
                return "allow", "nothing changed in this turn: no verify needed", "", []
        rounds = reg.failing_rounds.get(name, 0)
        if rounds >= settings.max_repair_loops:
            last = reg.last_verify.get(name)
            failed = list(last.failed) if last and not last.passed else []
            job = last.job if last else ""
            reason = (
                f"the turn ends with verify failing: {rounds} failing round{'s' if rounds != 1 else ''} this turn "
                f"(max_repair_loops = {settings.max_repair_loops}); the failure report of job {job or '?'} stands: "
                f"{', '.join(failed) or 'see its report'} failed. `lockstep verify --full {job}` prints it"
            )
            return "escalate", reason, job, failed
        return None

    def on_done(self, peer, msg: m.Done, now: float) -> None:
        agent = self._session(msg.session, now)
        done = self.done_gate(agent.name, msg.tree, msg.head_tree)
        verdict, reason = done.verdict, done.reason
        self._record(rec.DoneDecided(agent=agent.name, session=agent.session, verdict=verdict, reason=reason))
        self._publish("done.decided", agent.name, {"verdict": verdict, "reason": reason})
        self._reply(peer, m.Gate(req=msg.req, subject="done", verdict=verdict, reason=reason, agent=agent.name))

    def done_gate(self, name: str, tree: str = "", head_tree: str = "") -> Verdict:
        """Pass only if a verify run that started after the agent's last write passed,
        and - when the agent says what its worktree holds (``tree``) - passed on that
        very content: an edit nobody announced changes the content and blocks."""
        reg = self.registry
        if self.settings.verify_policy == "off":
            return self.handoff_gate(name) or Verdict("pass", "verify policy is off: done is not gated")
        if name in reg.blocked:
            last = reg.handoffs.get(name)
            if reg.block_lifts.get(name) == ["handoff"] and last is not None and not last.passed:
                return Verdict(
                    "block", f"{name} is blocked by a rule until its handoff passes ({reg.blocked[name]}): the handoff "
                    f"{last.target} did not pass {_handoff_failure(last, last.threshold)}. Fix it and run `lockstep check handoff`",
                )
            return Verdict("block", f"{name} is blocked by a rule: {reg.blocked[name]}")
        verdict = self._verify_gate(name, tree, head_tree)
        if verdict.verdict == "pass":
            return self.handoff_gate(name) or verdict
        return verdict

    def _verify_gate(self, name: str, tree: str, head_tree: str) -> Verdict:
        reg = self.registry
        last_write = reg.last_write.get(name)
        last = reg.last_verify.get(name)
        if last_write is None and (last is None or last.passed):
            if not tree or tree == head_tree:
                return Verdict("pass", f"{name} wrote nothing: there is nothing to verify")
            if (job := reg.passed_on(name, tree)) is not None:
                return Verdict("pass", f"verify run {job} passed on this content")
            return Verdict("block", "the worktree has changes no passing verify run has seen (written without an intent?): run `lockstep verify` first")
        if last is None or last.mark < last_write:
            return Verdict("block", "no verify run since your last write: run `lockstep verify` first")
        if not last.passed:
            return Verdict("block", f"the last verify run (job {last.job}) failed: {', '.join(last.failed) or 'see its report'}")
        if tree and last.tree != tree:
            return Verdict("block", f"the worktree changed since verify run {last.job} passed (an edit nobody announced?): run `lockstep verify` again")
        return Verdict("pass", f"verify run {last.job} passed after your last write" + (" on this content" if tree else ""))

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
        if result.get("kind") == "handoff" and agent is not None:
            self._handoff_checked(job, agent, result)
        if result.get("verdict") == "pass":
            self._resolve(agent, str(result.get("name", "")))

    def _handoff_checked(self, job: str, agent: str, result: dict[str, Any]) -> None:
        """An agent's handoff note was scored: what the done gate and a handoff block read."""
        details = result.get("details") or {}
        facts = details.get("facts") or []
        score = int(details.get("score") or 0)
        # Held to [handoff] threshold at least: `--threshold 0` passes a check, never the bar.
        bar = max(int(details.get("threshold") or 0), self.settings.handoff_threshold)
        record = rec.HandoffChecked(
            agent=agent, job=job, target=str(result.get("target", "")), score=score,
            threshold=bar, passed=result.get("verdict") == "pass" and score >= bar,
            false_facts=[str(f.get("note", "")) for f in facts if isinstance(f, dict) and not f.get("holds")],
            missing=[str(x) for x in details.get("missing") or []],
        )
        self._record(record)
        self._publish(record.KIND, agent, rec.data_of(record))

    def handoff_gate(self, name: str) -> Verdict | None:
        """``[handoff] required``: a block when ``name``'s note has not passed since its
        last write (None: the requirement is met, or does not apply to ``name``)."""
        settings, reg = self.settings, self.registry
        if not settings.handoff_required or (settings.handoff_agents and name not in settings.handoff_agents):
            return None
        note, threshold = settings.handoff_path, settings.handoff_threshold
        how = f"`lockstep check handoff {note} --agent {name}`"
        last = reg.handoffs.get(name)
        if last is None or not _names_note(last.target, note):
            return Verdict("block", f"a handoff is required ([handoff] required): write {note} and run {how}; no check of it is recorded for {name}")
        if last.mark < reg.last_write.get(name, 0):
            return Verdict("block", f"{name} wrote since its handoff was checked (job {last.job}): run {how} again")
        if not last.passed or last.score < threshold:
            return Verdict("block", f"the handoff {note} did not pass {_handoff_failure(last, threshold)}. Fix it and run {how}")
        return None

    def _resolve(self, agent: str | None, probe: str) -> None:
        """``probe`` passed: findings of it that rules answered are resolved (said once
        to the operator for a notify), and answered again if they come back."""
        by_rule: dict[tuple[str, str, str], list[str]] = {}
        for standing in self.registry.repair.standing_for(agent, probe):
            by_rule.setdefault((standing.rule, standing.action, standing.finding), []).append(standing.probe)
        for (rule, action, finding), probes in by_rule.items():
            self.note(rec.RuleResolved(agent=agent, rule=rule, action=action, finding=finding, probes=probes))
            if action == "notify":
                whose = f" for {agent}" if agent else ""
                self.note(rec.Notice(agent=agent, message=f"resolved: {finding} ({', '.join(probes)}){whose}", operator=True))

    def job_finished(self, job: str, kind: str, gate: m.Gate) -> None:
        data = {"job": job, "kind": kind, "verdict": gate.verdict, "reason": gate.reason, "responses": gate.responses}
        if kind == "verify":  # the done gate and the repair loop read this one
            failed = [r.get("name", "?") for r in gate.results if r.get("verdict") != "pass"]
            self._record(rec.VerifyFinished(agent=gate.agent, **data, passed=gate.verdict == "pass", failed=failed, tree=gate.tree))
        else:
            self._record(rec.JobFinished(agent=gate.agent, **data))
        self._publish("job.finished", gate.agent, {**data, "gate": msgspec.to_builtins(gate)})

    def decide_rules(
        self, job: str, findings: list[Finding], rules: RuleTable, now: float, recent: list[tuple[float, Finding]] = ()
    ) -> list[Response]:
        """What the rule table answers to a job's findings.  Each decision is a
        ``rule.decided`` record before it is carried out; retry bounds count those (the
        registry's ``repair``), so a restart continues the count."""
        responses, _ = rules.decide(findings, self.registry.repair, now, recent)
        for r in responses:
            self._record(
                rec.RuleDecided(
                    agent=r.agent, job=job, action=r.action, params=r.params, reason=r.reason, finding=r.finding,
                    probes=list(r.probes), rule=r.rule, members=list(r.members),
                )
            )
        return responses

    def note(self, record: rec.Record) -> None:
        """Record and publish something a job did (a rule's response, a plan transition)."""
        self._record(record)
        self._publish(record.KIND, record.agent, rec.data_of(record))
