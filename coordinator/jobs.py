"""Jobs: checks, verify runs, plans and scheduled probes, run in the probe pool.

A request returns a job id at once (the core records ``job.started`` and emits
``StartJob``); the work runs here, in its own task, and reports back through the core
so that every result is a ledger record before it is published:

    job.started -> probe.result / verify.result (one per check, as they finish)
                -> rule.decided (the core's decision about findings, before it is
                   carried out) -> rule.response (what carrying it out did)
                -> job.finished / verify.finished (with the gate); a plan also
                   writes its transitions (plan.step.*, plan.finished ...)

Findings never get judgement, only rules (probes/rules.py): retry (ask the agent to
try again, bounded), roll back or restart (a configured command), touch a file, notify
the operator, block the agent, queue a task for an agent.

The runner only carries out effects: what to decide (the rules, their retry counts),
when an edit batch is over and what the gates say are the core's, in the registry and
the ledger, so a restart continues where it stood.

Plans are driven by the pure ``probes.plan.PlanMachine``; each of its transition
records goes to the ledger, and a plan cut short by a restart resumes from them.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import msgspec
import trio

from ledger import Ledger
from ledger import records as rec
from probes import checklogs, verifyrun
from probes import plan as plans
from probes.config import Config, ConfigError, Probe, load_config
from probes.model import (
    FAIL,
    HANDOFF_INCOMPLETE,
    WORKER_LOST,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.pool import ProbePool
from probes.rules import Finding, Response, RuleTable, normalize_finding
from protocol import messages as m
from protocol import restore
from protocol.discovery import locate
from protocol.errors import PeerError, UsageError
from protocol.paths import Pattern, escape

from . import notify, policy
from .effects import Effect, Send, StartJob
from .workers import WorkerBroker, WorkerLost, work_for

if TYPE_CHECKING:
    from .core import Core

log = logging.getLogger("lockstep")

KEEP_FINISHED_JOBS = 500  # finished jobs kept for polling
CANCELLABLE = ("check", "verify", "plan")  # job kinds a requester that stops waiting may cancel
STOP_REASON_LIMIT = 1000  # characters of a stop's ``by`` / ``reason`` kept in the record
KEEP_DEPLOYS = 10_000  # deploy.seen records kept in memory for bundle probes (the newest)
Apply = Callable[[Callable[[float], list[Effect]]], Awaitable[None]]


@dataclass
class JobView:
    job: str
    kind: str
    agent: str | None
    total: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    gate: m.Gate | None = None
    about: dict[str, dict[str, Any]] = field(default_factory=dict)  # check -> where and how it ran
    worktree: Path | None = None  # where a verify run's checks run
    tree: str = ""  # a verify run: the content id it ran on ("" unknown, or changed during the run)
    remote: str | None = None  # the agent on another host whose worker runs this job's probes
    started: float = field(default_factory=time.monotonic)
    session: str | None = None  # the session that asked for it: the only one that may cancel it
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)  # cancelled: its probes end
    name: str = ""  # a plan's [plan] name (``plan stop`` finds it by that)
    step: str = ""  # a plan's current step
    stopped: tuple[str, str] | None = None  # a plan someone asked to stop: (by, reason)
    ended_by_stop: bool = False  # ...and it ended so (not on its own first)

    def reply(self, req: int, since: int = 0) -> m.JobReply:
        return m.JobReply(
            req=req,
            job=self.job,
            kind=self.kind,
            state="finished" if self.gate is not None else "running",
            done=len(self.results),
            total=self.total,
            results=self.results[max(0, since):] if since else self.results,
            gate=self.gate,
            stopped=self.ended_by_stop,
        )


class JobRunner:
    def __init__(
        self, core: Core, apply: Apply, pool: ProbePool, repo_root: Path, state_dir: Path | None = None,
        workers: WorkerBroker | None = None, is_remote: Callable[[str], bool] | None = None, ledger: Ledger | None = None,
    ) -> None:
        self._core = core
        self._ledger = ledger  # what a handoff check is checked against (the agent's writes and verify runs)
        # Agents on other hosts: their probes run on their own worker (workers.py).
        self._workers = workers
        self._is_remote = is_remote or (lambda agent: False)  # a live session of this agent is on another host
        self._remote_jobs: dict[str, str] = {}  # job -> the remote agent (its key's name) that asked
        self._apply = apply  # run a core call and carry out its effects, in the turn
        self._pool = pool
        self._repo_root = repo_root
        self._state_dir = state_dir  # where each check's whole output is kept (None: nowhere)
        self._jobs: OrderedDict[str, JobView] = OrderedDict()
        self._build_hashes: dict[str, str] = {}  # build folder -> newest artifact's hash
        # The deploy history (deploy.seen), oldest first, as [url, hash, size, wall-clock
        # time]: bundle probes judge it; a URL's last hash decides whether a sighting is new.
        self._deploys: list[list[Any]] = []
        self._served: dict[str, str] = {}  # url -> the hash last recorded there
        self._done_waiters: dict[str, list[trio.Event]] = {}  # agent -> plan steps waiting
        self.config = self._load_repo_config()
        self._rules = RuleTable.from_config(self.config)
        # Findings of earlier batches, (when judged, finding), for rules that count across
        # batches (``within``); kept as long as the longest window.  Rebuilt from the
        # ledger at start (``recent_findings_from``), so a restart keeps the windows.
        self._recent: list[tuple[float, Finding]] = []
        self._said_unconfigured: set[tuple[str, ...]] = set()  # restarts with no command, said once

    def _load_repo_config(self) -> Config:
        try:
            return load_config(self._repo_root)
        except ConfigError as exc:
            log.error("%s; running with default rules and no scheduled probes", exc.message)
            return Config()

    # ------------------------------------------------------------------ entry points

    def pool_statistics(self):
        return self._pool.statistics()

    def running(self) -> list[m.JobInfo]:
        """The jobs still running, for ``status`` (a viewer opened late sees them)."""
        now = time.monotonic()
        return [
            m.JobInfo(job=v.job, kind=v.kind, agent=v.agent, done=len(v.results), total=v.total, running_for=round(now - v.started, 3))
            for v in self._jobs.values()
            if v.gate is None
        ]

    def start(self, nursery: trio.Nursery, effect: StartJob) -> None:
        view = JobView(effect.job, effect.kind, effect.agent, session=getattr(effect.request, "session", None))
        self._jobs[effect.job] = view
        while len(self._jobs) > KEEP_FINISHED_JOBS:
            oldest = next(iter(self._jobs))
            if self._jobs[oldest].gate is None:
                break  # never forget a running job
            del self._jobs[oldest]
        nursery.start_soon(self._run, view, effect.request, name=f"job {effect.job}")

    def is_remote(self, agent: str | None) -> bool:
        """Whether ``agent``'s live session is on another host (its worktree is there)."""
        return agent is not None and self._is_remote(agent)

    def asked_remotely(self, job: str, agent: str) -> None:
        """Job ``job`` was asked for by ``agent``'s key from another host: its probes run
        on that agent's worker (called before the job starts)."""
        self._remote_jobs[job] = agent

    def register(self, job: str, kind: str, agent: str | None) -> JobView:
        """A job run by someone else (a landing): its results stream into the view, so
        ``job`` queries and ``status`` see it like any other."""
        view = self._jobs[job] = JobView(job, kind, agent)
        return view

    async def land_specs(self, view: JobView, worktree: Path, venv: str = "") -> list[ProbeSpec]:
        """The repository's checks as ``worktree`` (a landing's merged tree) defines
        them, minus autofix ones: a landing verifies what it lands, it never rewrites it."""
        specs = [s for s in await self._specs(view, m.Verify(cwd=str(worktree), venv=venv)) if not s.autofix]
        view.total = len(specs)
        return specs

    async def run_land_checks(self, view: JobView, specs: list[ProbeSpec]) -> list[ProbeResult]:
        results = await self._pool.run_suite(specs, on_result=lambda i, r: self._progress(view, r))
        return [self._annotated(view, r) for r in results]

    def answer(self, peer: Any, query: m.JobQuery, remote: str | None = None) -> list[Effect]:
        """``remote``: the agent whose key asked from another host."""
        if query.stop:
            return self.stop_plan(peer, query, remote)
        view = self._jobs.get(query.job)
        if view is None:
            return [Send(peer, m.Error(req=query.req, code="bad_request", message=f"no job {query.job!r} (finished long ago, or never started)"))]
        if query.cancel and view.gate is None:
            if view.kind not in CANCELLABLE:
                return [Send(peer, m.Error(req=query.req, code="bad_request", message=f"job {view.job} is a {view.kind} job: only check, verify and plan jobs can be cancelled"))]
            if query.session != view.session:
                return [Send(peer, m.Error(req=query.req, code="refused", message=f"job {view.job} was asked for in another session: only that one may cancel it"))]
            if view.kind == "plan":
                self._stop(view, query.by or view.agent or "its requester", query.reason or "its requester stopped waiting (Ctrl-C)")
            else:
                view.scope.cancel()
        return [Send(peer, view.reply(query.req, query.since))]

    def stop_plan(self, peer: Any, query: m.JobQuery, remote: str | None = None) -> list[Effect]:
        """``plan stop``: stop the running plan whose job id or [plan] name is
        ``query.job``.  Its task records ``plan.stopped`` and finishes the job once
        its step's command is ended (the reply says only that the stop is under way).
        From another host (``remote``, the key's agent) only that agent's own plans:
        run in its session or on its worker."""
        view = self._jobs.get(query.job)
        if view is not None and view.kind != "plan":
            return [Send(peer, m.Error(req=query.req, code="bad_request", message=f"job {view.job} is a {view.kind} job, not a plan: `lockstep plan status` lists the plans"))]
        if view is None or view.gate is not None:
            named = [v for v in self._jobs.values() if v.kind == "plan" and v.gate is None and v.name == query.job]
            if len(named) > 1:
                jobs = ", ".join(v.job for v in named)
                return [Send(peer, m.Error(req=query.req, code="refused", message=f"{len(named)} running plans are named {query.job!r} (jobs {jobs}): name one by its job id"))]
            if not named:
                return [Send(peer, m.Error(req=query.req, code="not_found", message=f"no running plan {query.job!r} (a job id or a [plan] name): `lockstep plan status` lists the plans"))]
            view = named[0]
        if remote is not None and remote not in (view.agent, view.remote):
            owner = view.agent or view.remote or "the coordinator's host"
            why = f"the key of {remote} may stop its own plans only: job {view.job} ({view.name!r}) is {owner}'s"
            return [Send(peer, m.Error(req=query.req, code="forbidden", message=why))]
        self._stop(view, query.by or "someone", query.reason or "no reason given")
        return [Send(peer, view.reply(query.req))]

    @staticmethod
    def _stop(view: JobView, by: str, reason: str) -> None:
        """End the plan where it stands: its task is cancelled (a running command's
        whole process group ends: probes/kinds/command.py), then records the stop."""
        if view.stopped is None:  # the first stop says who and why
            view.stopped = (by[:STOP_REASON_LIMIT], reason[:STOP_REASON_LIMIT])
        view.scope.cancel()

    def observe(self, nursery: trio.Nursery, publication: m.Publication) -> None:
        """Publications the runner acts on: a passing ``done`` completes a plan step
        that expects that agent's action; an operator notice goes to the desktop and
        the webhook of ``[notify]`` (coordinator/notify.py).  (Edit batches are the
        core's: Core.tick.)"""
        if publication.kind == "done.decided" and publication.data.get("verdict") == "pass":
            for event in self._done_waiters.pop(publication.agent, []):
                event.set()
        if publication.kind == "notice" and publication.data.get("operator") and (self.config.notify.desktop or self.config.notify.webhook):
            data = {"agent": publication.agent, "seq": publication.seq, "epoch": publication.epoch}
            nursery.start_soon(notify.deliver, self.config.notify, publication.data.get("message", ""), data)

    async def build_hashes_from(self, ledger: Ledger) -> None:
        """The last recorded build hash of each folder, so ``build`` compares with it."""

        def scan() -> dict[str, str]:
            hashes = {}
            for event in ledger.events(kinds=["probe.result"]):
                if event.data.get("kind") == "build" and event.data.get("details", {}).get("hash"):
                    hashes[event.data["target"]] = event.data["details"]["hash"]
            return hashes

        self._build_hashes = await trio.to_thread.run_sync(scan)

    async def deploys_from(self, ledger: Ledger) -> None:
        """The recorded deploy history, so bundle probes judge what was seen before a
        restart and a restart records no sighting twice."""

        def scan() -> list[list[Any]]:
            return [
                [e.data.get("url", ""), e.data.get("hash", ""), e.data.get("size"), e.ts]
                for e in ledger.events(kinds=["deploy.seen"])
            ][-KEEP_DEPLOYS:]

        self._deploys = await trio.to_thread.run_sync(scan)
        self._served = {url: digest for url, digest, _, _ in self._deploys}

    async def recent_findings_from(self, ledger: Ledger) -> None:
        """The findings the rules' ``within`` windows count, as they stood before a
        restart: the failing results the ledger holds from the last ``window`` seconds,
        each dated by its append (wall clock, moved onto our monotonic clock).  A
        landing's checks never reach the rules, so their results are left out."""
        window = self._rules.window
        if not window:
            return
        wall, now = time.time(), trio.current_time()

        def scan() -> list[tuple[float, Finding]]:
            landings = {record.job for _, record in ledger.records(kinds=["land.queued"])}
            first = ledger.first_id_at(wall - window)
            found = []
            for _, ts, r in ledger.timed_records(first - 1, kinds=["probe.result", "verify.result"]):
                if r.finding is not None and r.job not in landings:
                    finding = Finding(finding=r.finding, probe=r.name, agent=r.agent, details=r.reason, kind=r.kind, target=r.target)
                    found.append((now - max(0.0, wall - ts), finding))
            return found

        self._recent = await trio.to_thread.run_sync(scan)

    # ------------------------------------------------------------------ one job

    async def _run(self, view: JobView, request: m.Request) -> None:
        results: list[ProbeResult] = []
        remote = self._remote_jobs.pop(view.job, None) or (view.agent if view.agent and self._is_remote(view.agent) else None)
        view.remote = remote
        gate: m.Gate | None = None
        with view.scope:
            gate, results = await self._work(view, request, remote)
        if gate is None and view.stopped is not None:
            gate = await self._record_stop(view)
        if gate is None:  # cancelled: its probes were ended (a command's whole process group)
            gate = m.Gate(subject=view.kind, verdict="fail", job=view.job, agent=view.agent, results=list(view.results),
                          reason=f"cancelled: its requester stopped waiting; {len(view.results)} of {view.total or '?'} checks had finished")
        if self._state_dir is not None and view.kind in ("check", "verify"):
            await trio.to_thread.run_sync(checklogs.prune, self._state_dir)
        responses = await self._respond(view, results)
        if responses:
            gate = msgspec.structs.replace(gate, responses=responses)
        view.gate = gate
        await self._apply(lambda now: self._core.job_finished(view.job, view.kind, gate, now))

    async def _work(self, view: JobView, request: m.Request, remote: str | None) -> tuple[m.Gate, list[ProbeResult]]:
        """Run the job's probes: its gate and results (a failure to run is a failing gate)."""
        results: list[ProbeResult] = []
        try:
            if view.kind == "plan":
                gate = await self._run_plan(view, request, remote=remote)
            else:
                if remote is not None and view.kind == "verify":
                    results = await self._run_remote_verify(view, request, remote)
                elif remote is not None:  # a check, or a trigger's probes, on the agent's host
                    specs = [self._check_spec(request, request.cwd)] if view.kind == "check" else self._trigger_specs(request, request.cwd)
                    specs = [await self._with_handoff_evidence(spec, view.agent, None) for spec in specs]
                    view.total = len(specs)
                    results = await self._runner(view.job, remote).run_suite(specs, on_result=lambda i, r: self._progress(view, r))
                else:
                    specs = await self._specs(view, request)
                    view.total = len(specs)
                    if view.kind == "verify":
                        results = await self._run_verify(view, specs)
                    else:
                        results = await self._pool.run_suite(specs, on_result=lambda i, r: self._progress(view, r))
                results = [self._annotated(view, r) for r in results]
                gate = self._gate(view, results)
        except WorkerLost as exc:  # a finding like any other, so rules may answer it (e.g. retry)
            lost = ProbeResult(
                name=view.kind, kind="command", target=getattr(request, "cwd", ""), verdict=FAIL, finding=WORKER_LOST,
                reason=f"{exc.message}; what it reported before is recorded, the rest did not run",
            )
            await self._progress(view, lost)
            results = [lost]
            gate = self._gate(view, results)
        except (ProbeError, PeerError, UsageError, plans.PlanReplayError) as exc:
            gate = m.Gate(subject=view.kind, verdict="fail", reason=getattr(exc, "message", str(exc)), job=view.job, agent=view.agent)
        except Exception as exc:  # a bug in one job must not take the coordinator down
            log.exception("job %s crashed", view.job)
            gate = m.Gate(subject=view.kind, verdict="fail", reason=f"internal error running the job: {exc!r} (see coordinator.log)", job=view.job, agent=view.agent)
        return gate, results

    async def _run_verify(self, view: JobView, specs: list[ProbeSpec]) -> list[ProbeResult]:
        """The read-only checks in parallel, then the autofix ones if all passed
        (probes/autofix.py); results in spec order."""
        results, view.tree = await verifyrun.run_verify(
            self._pool, specs, view.worktree or self._repo_root,
            lambda path: self._holder_of(path, view.agent), lambda r: self._progress(view, r),
        )
        return results

    async def _run_remote_verify(self, view: JobView, request: m.Verify, agent: str) -> list[ProbeResult]:
        """A verify run in a worktree on ``agent``'s host, by its worker: the suite is
        that worktree's, built and run there; results come back one by one and go to the
        ledger exactly as local ones."""
        work = work_for(view.job, "verify", cwd=request.cwd, agent=agent, venv=request.venv, held=self._held_by_others(agent))
        results: dict[str, ProbeResult] = {}

        async def progress(message: m.WorkProgress) -> None:
            result = msgspec.convert(message.result, ProbeResult)
            view.total = message.total or view.total
            if message.about:
                view.about[result.name] = message.about
            results[result.name] = result
            await self._progress(view, result)

        done = await self._workers_or_fail(agent).run(agent, work, progress)
        if done.error:
            raise ProbeError(done.error)
        view.tree = done.tree
        return [results[name] for name in done.order if name in results]

    def _held_by_others(self, agent: str) -> list[list[str]]:
        """(pattern, holder) of every path another agent holds exclusively, or holds
        through a stale holder's lock delay: an autofix check run elsewhere must not
        change them (the same rule as ``_holder_of``, as a list to send)."""
        reg = self._core.registry
        now = trio.current_time()
        held = [[pattern.text, entry.agent] for pattern, entry in reg.claims if entry.agent != agent and entry.access == "exclusive"]
        held += [[pattern.text, hold.former] for pattern, hold in reg.holds if hold.former != agent and hold.until > now]
        return held

    def _workers_or_fail(self, agent: str) -> WorkerBroker:
        if self._workers is None:  # cannot happen: remote agents need the CURVE endpoint
            raise PeerError("no_worker", f"{agent} is on another host and this coordinator runs no remote workers")
        return self._workers

    def _runner(self, job: str, agent: str | None) -> ProbePool | RemoteRunner:
        """Where a job's probes run: the local pool, or ``agent``'s worker."""
        if agent is None:
            return self._pool
        return RemoteRunner(self._workers_or_fail(agent), agent, job)

    def _holder_of(self, path: str, agent: str | None) -> str | None:
        """Another agent holding ``path`` exclusively (or in a stale holder's lock
        delay), if any: an autofix check must not change it.  ``path`` is a file name
        from git: its ``[``, ``*`` and ``?`` are characters of the name, not globs
        (``app/[slug]/page.tsx`` read as a glob would name ``app/s/page.tsx`` and
        miss the claim on the real file)."""
        try:
            pattern = Pattern(escape(path))
        except PeerError:
            return None  # not a path a claim can name
        me = agent or ""
        found = policy.claim_conflicts(self._core.registry, me, pattern, "shared")
        found += policy.hold_conflicts(self._core.registry, me, pattern, trio.current_time())
        return found[0].holder if found else None

    async def _worktree_of(self, cwd: str) -> Path:
        """The worktree holding ``cwd``; a directory of another repository is refused
        (probes run commands: only in this repository's worktrees)."""
        if "\x00" in cwd:  # no path holds one: the OS refuses it (ValueError), not a bug of ours
            raise PeerError("bad_path", f"{cwd!r} is not a directory path (it holds a NUL byte)")
        place = await trio.to_thread.run_sync(locate, cwd)
        if place.repo_id != self._core.repo:
            raise PeerError("bad_path", f"{cwd} is not in a worktree of {self._core.repo}")
        return place.worktree

    async def _specs(self, view: JobView, request: m.Request) -> list[ProbeSpec]:
        cwd = request.cwd or str(self._repo_root)
        root = await self._worktree_of(cwd)
        if view.kind == "check":
            return [self._with_log(view, await self._with_handoff_evidence(self._check_spec(request, cwd), view.agent, root))]
        if view.kind == "trigger":
            return [await self._with_handoff_evidence(spec, view.agent, root) for spec in self._trigger_specs(request, cwd)]
        view.worktree = root
        specs, about = await verifyrun.verify_specs(
            root, view.agent, getattr(request, "venv", ""), lambda spec: self._with_log(view, spec)
        )
        view.about.update(about)
        return specs

    async def _with_handoff_evidence(self, spec: ProbeSpec, agent: str | None, root: Path | None) -> ProbeSpec:
        """A handoff check with what it is checked against (probes/kinds/handoff.py):
        whose note it is, the branch its work is compared with, and what the ledger
        knows of that agent.  Other specs as they are."""
        if spec.kind != "handoff":
            return spec
        registry = self._core.registry  # read here, in the loop's thread: the ledger in another
        claimed = [entry.pattern.text for entry in registry.entries_of(agent)] if agent else []
        last = registry.last_verify.get(agent) if agent else None
        known = await trio.to_thread.run_sync(self._ledger_evidence, agent, last)
        index = self._core.integration
        # Whatever the caller put in these, the coordinator's word replaces it: a note is
        # checked against what Lockstep knows, not against what its writer says.
        params = {**spec.params, "agent": agent, "known": {**known, "claimed": claimed}, "base": index.branch if index is not None else None}
        params.pop("repo_root", None)
        if root is not None:
            params["repo_root"] = str(root)
        return msgspec.structs.replace(spec, params=params)

    def _ledger_evidence(self, agent: str | None, last: Any) -> dict[str, Any]:
        """What the ledger knows of ``agent``'s work (``probes.handoff_facts.Evidence``
        fields): the paths it claimed, announced or wrote (reported writes included, even
        to paths others hold), and its last verify run
        (``last``) with each check's result.  Runs in a thread."""
        if agent is None or self._ledger is None:
            return {"written": [], "verify": None}
        written: dict[str, None] = {}
        for event in self._ledger.events(kinds=["intent.decided", "claim.granted", "write.unannounced"], agent=agent):
            if event.kind == "claim.granted":
                written.update(dict.fromkeys(event.data.get("patterns", [])))
            elif event.kind == "write.unannounced" or event.data.get("verdict") in ("allow", "warn"):
                written.update(dict.fromkeys(event.data.get("paths", [])))  # (a write to others' paths is a change too)
        verify = None
        if last is not None:
            checks = [
                {"name": e.data.get("name", "?"), "verdict": e.data.get("verdict", ""), "target": e.data.get("target", ""), "output": e.data.get("output", "")}
                for e in self._ledger.events(kinds=["verify.result"], agent=agent)
                if e.data.get("job") == last.job
            ]
            verify = {"job": last.job, "passed": last.passed, "checks": checks}
        return {"written": list(written), "verify": verify}

    def _trigger_specs(self, request: m.Ran, cwd: str) -> list[ProbeSpec]:
        """The probes of the [[trigger]]s the agent's command matches (as the coordinator
        read them), to run in ``cwd``."""
        specs = []
        for probe in self.config.triggered(request.command):
            runtime: dict[str, Any] = {}
            if probe.kind == "build" and "dir" in probe.params:
                runtime["previous_hash"] = self._build_hashes.get(str(Path(cwd, probe.params["dir"])))
            specs.append(self._reached(probe.to_spec(cwd=cwd, **runtime)))
        return specs

    def _check_spec(self, request: m.Check, cwd: str) -> ProbeSpec:
        """The spec of one ``check`` request (its build hash from the ledger's last)."""
        probe: m.ProbeRequest = request.probe
        params = dict(probe.params)
        if probe.kind == "build" and "previous_hash" not in params and "dir" in params:
            params["previous_hash"] = self._build_hashes.get(str(Path(cwd, params["dir"])))
        spec = ProbeSpec(name=probe.name or probe.kind, kind=probe.kind, params=params, cwd=cwd)
        if probe.timeout is not None:
            spec = msgspec.structs.replace(spec, timeout=probe.timeout)
        return self._reached(spec)

    def _reached(self, spec: ProbeSpec) -> ProbeSpec:
        """A spec with what only the coordinator may say, replacing whatever the request
        said: an http or consistency probe's ``reach`` (what may be fetched is the
        operator's lockstep.toml, never the asking agent's), a bundle probe's history."""
        if spec.kind in ("http", "consistency"):
            reach = msgspec.to_builtins(self.config.http.reach(self._repo_root))
            return msgspec.structs.replace(spec, params={**spec.params, "reach": reach})
        if spec.kind == "bundle":
            url = spec.params.get("url")
            deploys = [d for d in self._deploys if url is None or d[0] == url]
            return msgspec.structs.replace(spec, params={**spec.params, "deploys": deploys, "now": time.time()})
        return spec

    @staticmethod
    def _annotated(view: JobView, result: ProbeResult) -> ProbeResult:
        about = view.about.get(result.name)
        if about is None or "environment" in result.details:
            return result
        return msgspec.structs.replace(result, details={**result.details, "environment": about})

    def _with_log(self, view: JobView, spec: ProbeSpec) -> ProbeSpec:
        """A command spec that keeps its whole output in the state directory."""
        if self._state_dir is None or spec.kind != "command":
            return spec
        path = checklogs.log_path(self._state_dir, view.job, spec.name)
        return msgspec.structs.replace(spec, params={**spec.params, "log": str(path)})

    async def _progress(self, view: JobView, result: ProbeResult, listed: bool = True) -> None:
        """One result: recorded (``probe.result``), published; ``listed``: one of the
        job's own results (a plan lists its steps instead)."""
        result = self._annotated(view, result)
        data = msgspec.to_builtins(result)
        if listed:
            view.results.append(data)
        if result.kind == "build" and result.details.get("hash"):
            self._build_hashes[result.target] = result.details["hash"]
        # Shielded: a result that arrived is recorded whole even if its job is being
        # cancelled (a cancel inside ``_apply`` could drop records the core has made).
        with trio.CancelScope(shield=True):
            await self._apply(lambda now: self._core.job_result(view.job, view.kind, view.agent, data, now))
            seen = result.details.get("deploy") if result.kind == "http" else None
            if isinstance(seen, dict) and seen.get("hash") and self._served.get(seen.get("url", "")) != seen["hash"]:
                await self._record_deploy(view, result.name, seen)

    async def _record_deploy(self, view: JobView, probe: str, seen: dict[str, Any]) -> None:
        """A URL serves another bundle than the last one recorded there: a deploy."""
        url, digest = str(seen.get("url", "")), str(seen["hash"])
        size = seen.get("size") if isinstance(seen.get("size"), int) else None
        record = rec.DeploySeen(agent=view.agent, url=url, hash=digest, size=size, probe=probe, job=view.job, previous=self._served.get(url, ""))
        self._served[url] = digest
        self._deploys.append([url, digest, size, time.time()])
        del self._deploys[:-KEEP_DEPLOYS]
        await self._apply(lambda now: self._core.note(record, now))

    def _gate(self, view: JobView, results: list[ProbeResult]) -> m.Gate:
        failed = [r for r in results if not r.passed]
        if not failed:
            reason = f"{len(results)} check{'s' if len(results) != 1 else ''} passed"
        else:
            reason = f"{len(failed)} of {len(results)} failed: " + "; ".join(f"{r.name}: {r.finding} ({r.reason})" for r in failed)
        ordered = [msgspec.to_builtins(r) for r in results]
        return m.Gate(subject=view.kind, verdict="fail" if failed else "pass", reason=reason, job=view.job, agent=view.agent, results=ordered, tree=view.tree)

    # ------------------------------------------------------------------ rules

    async def _respond(self, view: JobView, results: list[ProbeResult]) -> list[dict[str, Any]]:
        findings = [f for f in (Finding.from_result(r, view.agent) for r in results) if f is not None]
        if not findings:
            return []
        decided: list[Response] = []
        window = self._rules.window

        def decide(now: float) -> list[Effect]:  # the decision, and its retry count, are the core's
            recent = [(at, f) for at, f in self._recent if now - at <= window]
            decisions = self._core.decide_rules(view.job, findings, self._rules, now, recent)
            decided.extend(decisions.responses)
            self._recent = recent + [(now, f) for f in findings] if window else []
            return decisions.effects

        await self._apply(decide)
        responses = decided
        done = []
        for response in responses:
            outcome = await self._carry_out(response, view)
            details: dict[str, Any] = {}
            if isinstance(outcome, tuple):  # what it did, exactly (a rollback's paths)
                outcome, details = outcome
            record = rec.RuleResponse(
                agent=response.agent,
                job=view.job,
                action=response.action,
                params=response.params,
                reason=response.reason,
                finding=response.finding,
                probes=list(response.probes),
                outcome=outcome,
                details=details or msgspec.UNSET,
            )
            await self._apply(lambda now, record=record: self._core.note(record, now))
            done.append(msgspec.to_builtins(rec.data_of(record)))
        return done

    async def _carry_out(self, response: Response, view: JobView) -> str | tuple[str, dict[str, Any]]:
        """Do what the rule said.  Returns one line saying what happened (and, for a
        rollback, exactly what it restored)."""
        params, agent = response.params, response.agent
        message = params.get("message") or f"{response.finding} ({', '.join(response.probes)})"
        remote = self._remote_agent(view, agent)
        match response.action:
            case "retry":
                notice = rec.Notice(agent=agent, message=f"retry (attempt {params.get('attempt')} of {params.get('max')}): {message}")
                await self._apply(lambda now: self._core.note(notice, now))
                return f"asked {agent or 'the requester'} to retry"
            case "restart":
                return await self._restart(response, view, remote)
            case "rollback":
                if not params.get("cmd"):
                    return await self._roll_back(response, view, remote)
                (ran,) = await self._run_commands([params["cmd"]], "rollback", view, remote)
                return ran
            case "touch" if remote is not None:  # in its clone on its host, by its worker
                relative = params.get("path", "index.html")
                worktree = self._worktree_for(remote, view)
                if worktree is None or Path(relative).is_absolute() or ".." in Path(relative).parts:
                    return f"refused to touch {relative} for {remote}: not a path inside its clone"
                (ran,) = await self._run_commands([f"touch -- {shlex.quote(relative)}"], "touch", view, remote)
                return ran
            case "touch":
                path = (self._repo_root / params.get("path", "index.html")).resolve()
                if self._repo_root.resolve() not in path.parents:
                    return f"refused to touch {path}: outside the repository"
                await trio.to_thread.run_sync(lambda: path.touch(exist_ok=True))
                os.utime(path)
                return f"touched {path}"
            case "notify":
                await self._apply(lambda now: self._core.note(rec.Notice(agent=agent, message=message, operator=True), now))
                return "operator notified"
            case "block_agent":
                if agent is None:
                    return "no single agent to block"
                notes = self._handoff_notes(response, view, agent)
                if notes is None:
                    blocked = rec.AgentBlocked(agent=agent, reason=f"{response.finding}: {message}")
                    until = "its next passing verify run"
                else:  # only a passing handoff lifts it; meanwhile the agent may fix its note
                    blocked = rec.AgentBlocked(agent=agent, reason=f"{response.finding}: {message}", lifted_by="handoff", allow=notes)
                    until = "its next passing handoff check (`lockstep check handoff`)"
                await self._apply(lambda now: self._core.note(blocked, now))
                return f"blocked {agent} until {until}"
            case "queue_task":
                target = params.get("agent") or agent
                task = str(params.get("task") or message)
                await self._apply(lambda now: self._core.queue_task(target, task, response.finding, now))
                return f"queued a task for {target or 'anyone'}: {task}"
        return f"unknown action {response.action}"

    def _handoff_notes(self, response: Response, view: JobView, agent: str) -> list[str] | None:
        """For a response to handoff findings: the notes concerned, relative to the
        agent's worktree (what it may still write while blocked); None for others."""
        results = [r for r in view.results if r.get("name") in response.probes and r.get("kind") == "handoff"]
        if not results and normalize_finding(response.finding) != HANDOFF_INCOMPLETE:
            return None  # (a plan's probes are not among its results: the phrase tells)
        live = self._core.registry.agents.get(agent)
        worktree = Path(live.worktree) if live is not None and live.worktree else self._repo_root
        notes = []
        for result in results:
            try:
                notes.append(Path(result.get("target", "")).relative_to(worktree).as_posix())
            except ValueError:
                continue  # a note outside the agent's worktree: nothing to allow
        return notes

    def _remote_agent(self, view: JobView, agent: str | None) -> str | None:
        """``agent`` if its worktree is on another host (a response for it runs there)."""
        if agent is None:
            return None
        if agent == view.agent and view.remote is not None:
            return view.remote
        return agent if self._is_remote(agent) else None

    def _worktree_for(self, agent: str, view: JobView) -> Path | None:
        live = self._core.registry.agents.get(agent)
        return Path(live.worktree) if live is not None and live.worktree else view.worktree

    async def _run_commands(self, commands: list[str], name: str, view: JobView, remote: str | None) -> list[str]:
        """A response's commands, one after another: on this host in the repository's
        root, or for an agent on another host by its worker, in its clone (the
        coordinator's host has neither its files nor its processes).  One line each."""
        where = ""
        if remote is None:
            runner, cwd = self._pool, str(self._repo_root)
        else:
            worktree = self._worktree_for(remote, view)
            if worktree is None:
                return [f"no worktree known for {remote} on its host; {cmd!r} not run" for cmd in commands]
            if self._workers is None:  # cannot happen: remote agents need the CURVE endpoint
                return [f"{cmd!r} not run: {remote} is on another host and this coordinator runs no remote workers" for cmd in commands]
            runner, cwd = RemoteRunner(self._workers, remote, f"{view.job}/{name}"), str(worktree)
            where = f" in {worktree} on {remote}'s host"
        done = []
        for cmd in commands:
            spec = ProbeSpec(name=name, kind="command", params={"shell": cmd}, cwd=cwd, timeout=600)
            try:
                result = await runner.run(spec)
            except (ProbeError, PeerError) as exc:  # no worker, or it went away meanwhile
                done.append(f"{cmd!r} not run on {remote}'s host: {exc.message}")
                continue
            done.append(f"ran {cmd!r}{where}: exit {result.exit_code}" + ("" if result.passed else f" ({result.reason})"))
        return done

    async def _roll_back(self, response: Response, view: JobView, remote: str | None = None) -> tuple[str, dict[str, Any]]:
        """``rollback`` with no command: the agent's worktree back to what its newest
        passing verify run saw, paths other agents hold left alone (protocol/restore.py).
        For an agent on another host its worker does it there, in its clone."""
        agent = response.agent
        if agent is None:
            return "no single agent whose verify run to roll back to; nothing restored (give the rule a cmd)", {}
        registry = self._core.registry
        passed = registry.passed_trees.get(agent) or {}
        if not passed:
            return f"{agent} has no passing verify run to roll back to; nothing restored", {}
        tree, job = list(passed.items())[-1]
        worktree = self._worktree_for(agent, view)
        if worktree is None:
            return f"no worktree known for {agent}; nothing restored", {}
        if remote is not None:
            return await self._roll_back_remote(remote, worktree, tree, job, view)
        try:
            changes = await trio.to_thread.run_sync(restore.changes_since, worktree, tree)
            kept = {path: holder for _, path in changes if (holder := self._holder_of(path, agent)) is not None}
            done = await trio.to_thread.run_sync(restore.restore, worktree, tree, changes, kept)
        except restore.ContentError as exc:
            return f"could not roll back {agent}'s worktree to verify run {job}: {exc}; nothing restored", {}
        details = {"tree": tree, "verify_job": job, "worktree": str(worktree), "restored": done.restored, "removed": done.removed, "kept": done.kept}
        return restore.describe(done, job), details

    async def _roll_back_remote(self, agent: str, worktree: Path, tree: str, job: str, view: JobView) -> tuple[str, dict[str, Any]]:
        work = work_for(f"{view.job}/rollback", "restore", cwd=str(worktree), agent=agent, tree=tree, held=self._held_by_others(agent))

        async def no_progress(message: m.WorkProgress) -> None:
            pass  # a restore sends its outcome with its end

        try:
            done = await self._workers_or_fail(agent).run(agent, work, no_progress)
        except (ProbeError, PeerError) as exc:  # no worker, or it went away meanwhile
            return f"could not roll back {agent}'s worktree on its host: {exc.message}; nothing restored", {}
        if done.error:
            return f"could not roll back {agent}'s worktree to verify run {job} on its host: {done.error}; nothing restored", {}
        result = msgspec.convert(done.restored, restore.Restored)
        details = {"tree": tree, "verify_job": job, "worktree": str(worktree), "restored": result.restored, "removed": result.removed,
                   "kept": result.kept, "host": agent}
        return f"{restore.describe(result, job)} (on {agent}'s host)", details

    async def _restart(self, response: Response, view: JobView, remote: str | None = None) -> str:
        """Run the restart command: the rule's ``cmd``, else the ``restart`` of each
        failing ``[[probe]]`` (each command once).  With none configured, say so to the
        operator once per set of probes (the response stands until they pass anyway)."""
        commands = [response.params["cmd"]] if response.params.get("cmd") else []
        if not commands:
            probes = self.config.probes_by_name()
            commands = list(dict.fromkeys(p.restart for name in response.probes if (p := probes.get(name)) and p.restart))
        if not commands:
            key = tuple(sorted(response.probes))
            outcome = (
                f"no restart command configured for {', '.join(response.probes)}: add restart = \"COMMAND\" to "
                f"{'their [[probe]] tables' if len(response.probes) > 1 else 'its [[probe]] table'} "
                "(or cmd to the rule) in lockstep.toml; nothing run"
            )
            if key not in self._said_unconfigured:
                self._said_unconfigured.add(key)
                notice = rec.Notice(agent=None, message=f"{response.finding}: {outcome}", operator=True)
                await self._apply(lambda now: self._core.note(notice, now))
            return outcome
        return "; ".join(await self._run_commands(commands, "restart", view, remote))

    # ------------------------------------------------------------------ scheduled probes

    async def run_scheduled(self, every: float, probes: tuple[Probe, ...]) -> None:
        """Run ``probes`` together every ``every`` seconds for as long as we serve: one
        cycle is one batch of findings for the rules (two endpoints down in the same
        cycle count together)."""
        cycles = 0
        names = "+".join(p.name for p in probes)
        while True:
            await trio.sleep(every)
            cycles += 1
            view = JobView(f"{names}#{cycles}", "scheduled", None, total=len(probes))
            specs = [self._reached(probe.to_spec(cwd=str(self._repo_root))) for probe in probes]
            try:
                results = await self._pool.run_suite(specs, on_result=lambda i, r: self._progress(view, r))
                await self._respond(view, results)
            except (ProbeError, PeerError, UsageError) as exc:
                log.error("scheduled probes %s: %s", names, getattr(exc, "message", exc))
            except Exception:  # a bug in one cycle must not take the coordinator down
                log.exception("scheduled probes %s crashed; the next cycle runs as usual", names)

    # ------------------------------------------------------------------ plans

    async def _run_plan(
        self, view: JobView, request: m.PlanRun, records: list[plans.TransitionRecord] | None = None, remote: str | None = None
    ) -> m.Gate:
        plan = plans.Plan.parse(request.plan, request.source or plans.PLAN_FILENAME, self.config.probes_by_name(), self.config.http)
        view.name = plan.name
        machine = plans.PlanMachine.replay(plan, records) if records else plans.PlanMachine(plan)
        cwd = request.cwd or str(self._repo_root)
        if remote is None:
            await self._worktree_of(cwd)  # a remote worktree is its worker's to find
        runner = self._runner(view.job, remote)
        view.total = len(plan.steps)
        while True:
            action = machine.next_action()
            view.step = getattr(action, "step", "")
            if isinstance(action, plans.Finished):
                verdict = {"succeeded": "pass", "failed": "fail"}.get(action.state, "escalate")
                return m.Gate(subject="plan", verdict=verdict, reason=f"plan {plan.name!r} {action.state}: {action.reason}".rstrip(": "), job=view.job, agent=view.agent)
            event = await self._carry_out_plan_action(action, plan, cwd, runner, view)
            for transition in machine.apply(event):
                record = rec.PLAN_TRANSITIONS[transition.kind](agent=view.agent, job=view.job, **msgspec.structs.asdict(transition))
                await self._apply(lambda now, record=record: self._core.note(record, now))
                if transition.to_state in plans.STEP_TERMINAL:
                    view.results.append(rec.data_of(record))

    async def _carry_out_plan_action(self, action: plans.Action, plan: plans.Plan, cwd: str, runner: ProbePool | RemoteRunner, view: JobView) -> plans.Event:
        match action:
            case plans.StartStep(step=step):
                return plans.Event(plans.STARTED, step)
            case plans.RunPreProbes(step=step, probes=probes) | plans.RunPostProbes(step=step, probes=probes):
                pre = isinstance(action, plans.RunPreProbes)
                failed = await self._failed_probes(probes, cwd, runner, view)
                if pre:
                    return plans.Event(plans.PRE_FAILED if failed else plans.PRE_PASSED, step, failed)
                return plans.Event(plans.POST_FAILED if failed else plans.POST_PASSED, step, failed)
            case plans.RunCommand(step=step, cmd=cmd) | plans.RunRollback(step=step, cmd=cmd):
                result = await runner.run(ProbeSpec(name=step, kind="command", params={"shell": cmd}, cwd=cwd, timeout=3600))
                ok = result.passed
                detail = f"{cmd!r} exit {result.exit_code}" + ("" if ok else f": {result.reason}")
                if isinstance(action, plans.RunRollback):
                    return plans.Event(plans.ROLLBACK_PASSED if ok else plans.ROLLBACK_FAILED, step, detail)
                return plans.Event(plans.RUN_PASSED if ok else plans.RUN_FAILED, step, detail)
            case plans.WaitForAgent(step=step, agent=agent, expect=expect):
                done = trio.Event()
                waiters = self._done_waiters.setdefault(agent, [])
                waiters.append(done)
                try:
                    notice = rec.Notice(agent=agent, message=f"plan {plan.name!r} step {step!r} waits for you: {expect}; say `lockstep done` when it is")
                    await self._apply(lambda now: self._core.note(notice, now))
                    await done.wait()
                finally:  # a stopped plan waits no more
                    if done in waiters:
                        waiters.remove(done)
                return plans.Event(plans.RUN_PASSED, step, f"{agent} passed its done gate")
        raise PeerError("internal", f"unknown plan action {action!r}")

    async def _record_stop(self, view: JobView) -> m.Gate:
        """A stopped plan's ``plan.stopped`` record, and its gate (outside its cancelled
        scope: these are written whatever the step was doing)."""
        by, reason = view.stopped or ("someone", "no reason given")
        record = rec.PlanStopped(agent=view.agent, job=view.job, plan=view.name, step=view.step, by=by, reason=reason)
        await self._apply(lambda now: self._core.note(record, now))
        view.ended_by_stop = True
        at = f" at step {view.step!r}" if view.step else ""
        return m.Gate(subject="plan", verdict="fail", reason=f"plan {view.name!r} stopped by {by}{at}: {reason}", job=view.job, agent=view.agent)

    async def _failed_probes(self, probes: tuple[Probe | str, ...], cwd: str, runner: ProbePool | RemoteRunner, view: JobView | None = None) -> str:
        """Run a step's probes; '' if all passed, else which failed and why.  Their
        findings go through the rules like any other (the plan still decides its step)."""
        known = self.config.probes_by_name()
        specs = []
        for probe in probes:
            resolved = known.get(probe) if isinstance(probe, str) else probe
            if resolved is None:
                return f"unknown probe {probe!r}"
            specs.append(await self._with_handoff_evidence(self._reached(resolved.to_spec(cwd=cwd)), view.agent if view else None, None))
        results = await runner.run_suite(specs)
        if view is not None:
            for result in results:
                await self._progress(view, result, listed=False)
            await self._respond(view, results)
        return "; ".join(f"{r.name}: {r.reason}" for r in results if not r.passed)

    async def resume_plans(self, nursery: trio.Nursery, ledger: Ledger) -> int:
        """Plans the ledger shows started and not ended: carry on where they stood."""

        def unfinished() -> list[tuple[dict, list[plans.TransitionRecord], str | None]]:
            started: dict[str, tuple[dict, str | None]] = {}
            records: dict[str, list[plans.TransitionRecord]] = {}
            for event in ledger.events(kinds=["job.started", *plans.PLAN_LEDGER_KINDS, plans.PLAN_STOPPED_KIND]):
                job = event.data.get("job")
                if event.kind == "job.started":
                    if event.data.get("kind") == "plan":
                        started[job] = (event.data, event.agent)
                elif event.kind in plans.PLAN_END_KINDS or event.kind == plans.PLAN_STOPPED_KIND:
                    started.pop(job, None)  # ended, or stopped by someone: never resumed
                elif job in started:
                    fields = {k: v for k, v in event.data.items() if k != "job"}
                    records.setdefault(job, []).append(msgspec.convert(fields, plans.TransitionRecord))
            return [(data, records.get(job, []), agent) for job, (data, agent) in started.items()]

        resumed = 0
        for data, records, agent in await trio.to_thread.run_sync(unfinished):
            view = JobView(data["job"], "plan", agent)
            self._jobs[view.job] = view
            request = m.PlanRun(plan=data["plan"], source=data.get("source", ""), cwd=data.get("cwd", ""))
            nursery.start_soon(self._resume_plan, view, request, records)
            resumed += 1
        return resumed

    async def _resume_plan(self, view: JobView, request: m.PlanRun, records: list[plans.TransitionRecord]) -> None:
        gate: m.Gate | None = None
        with view.scope:  # ``plan stop`` reaches a resumed plan too
            try:
                gate = await self._run_plan(view, request, records)
            except (ProbeError, PeerError, UsageError, plans.PlanReplayError) as exc:
                gate = m.Gate(subject="plan", verdict="escalate", reason=f"cannot resume: {exc}", job=view.job, agent=view.agent)
        if gate is None:  # only a stop cancels it
            gate = await self._record_stop(view)
        view.gate = gate
        await self._apply(lambda now: self._core.job_finished(view.job, "plan", gate, now))


class RemoteRunner:
    """A pool's ``run`` / ``run_suite`` for one job, carried out by an agent's worker on
    its own host: each call is one ``work`` of kind ``suite`` (id ``JOB/N``)."""

    def __init__(self, workers: WorkerBroker, agent: str, job: str) -> None:
        self._workers = workers
        self._agent = agent
        self._job = job
        self._calls = 0

    async def run(self, spec: ProbeSpec) -> ProbeResult:
        return (await self.run_suite([spec]))[0]

    async def run_suite(self, specs: list[ProbeSpec], on_result=None) -> list[ProbeResult]:
        self._calls += 1
        work = work_for(f"{self._job}/{self._calls}" if self._calls > 1 else self._job, "suite", agent=self._agent, specs=specs,
                        cwd=specs[0].cwd if specs else "")
        results: dict[str, ProbeResult] = {}

        async def progress(message: m.WorkProgress) -> None:
            result = msgspec.convert(message.result, ProbeResult)
            results[result.name] = result
            if on_result is not None:
                await on_result(len(results) - 1, result)

        done = await self._workers.run(self._agent, work, progress)
        if done.error:
            raise ProbeError(done.error)
        return [results[name] for name in done.order if name in results]
