"""The pure core: ``receive(peer, message, now)`` and ``tick(now)`` return effects.

No trio, zmq, sqlite or clock here.  The shell feeds in decoded messages, pid exits and
the monotonic time; the core answers with ``effects.*``: ledger records (which it has
already applied to its registry — see registry.py, Rule 1), replies, publications, pid
watches.  The shell commits a batch's records before it sends that batch's replies.

Inbound errors: a ``PeerError`` raised while handling a message becomes an ``Error``
reply to that peer and changes nothing (handlers validate before they record).  Any
other exception is a bug: the peer gets ``internal``, the shell logs the traceback
(``Bug``), and whatever the handler had already recorded stays in the output, so the
ledger still says exactly what the registry holds.
"""

from __future__ import annotations

import math
import re
import traceback
from typing import Any, NamedTuple

import msgspec

from ledger import records as rec
from probes.rules import Finding, Response, RuleTable
from protocol import messages as m
from protocol.errors import LocalError, LockstepError, PeerError
from protocol.gitrefs import is_commit_id
from protocol.paths import CONTROL_CHARACTER, Pattern, escape, overlaps
from protocol.uncommitted import touched

from . import lifecycle, mergeholds, policy
from .checks import Gates
from .effects import (
    Bug,
    CheckUncommitted,
    Effect,
    Outbox,
    Publish,
    Record,
    Send,
    StopServing,
    UnwatchPid,
    WatchPid,
)
from .inbox import Inbox
from .integration import Change, IntegrationIndex, stale_text
from .landgate import land_stop
from .registry import Agent, ClaimEntry, Registry, Snapshot
from .settings import Settings

AGENT_NAME, check_agent_name = m.AGENT_NAME, m.check_agent_name  # the rule lives with the wire types
_BRANCH = re.compile(r"[A-Za-z0-9._@+/-]{1,200}")  # what ``lockstep land`` accepts as a branch name
TOKEN_RESERVATION = 10_000  # tokens reserved per durable commit: each is an fsync the turn waits for
CONFLICTS_LISTED = 20  # conflicts named in one refusal or decision; the rest are counted
PID_MAX = 2**31 - 1  # pid_t is a signed 32-bit integer
CLAIM_ROW_BYTES = 75  # a status's claim row in msgpack, field names included, before its strings
ANSWERS_KEPT = 32  # per live session: answers a retried request gets again
# Live sessions at once: far above any team's agents, and a bound on what a loop opening
# sessions (a one-shot session lives for its TTL, which the client may set) can hold.
MAX_LIVE_SESSIONS = 10_000
# Live claims at once: each costs about 1.7 KB of the coordinator (100,000: +165 MiB).
# Past it a claim is refused and a write intent allowed without claiming.
MAX_LIVE_CLAIMS = 200_000


class CoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    messages: int
    errors: int
    grants: int
    refusals: int
    intents: int
    releases: int
    stale: int
    gone: int
    pauses: int
    publications: int
    retries: int = 0


class IntentOutcome(msgspec.Struct, frozen=True):
    """What the intent gate decided: the verdict, why, the grant the write is under."""

    verdict: str  # "allow" | "warn" | "block"
    reason: str
    token: int | None = None
    conflicts: list[m.Conflict] = []


class RuleDecisions(msgspec.Struct, frozen=True):
    """The rule table's responses to a job's findings, and the call's effects (their
    ``rule.decided`` records), for the job runner to carry out."""

    responses: list[Response]
    effects: list[Effect]


class Core:
    def __init__(
        self,
        settings: Settings,
        *,
        repo: str = "",
        host: str = "",
        endpoints: list[str] | None = None,
        pub_endpoints: list[str] | None = None,
    ) -> None:
        self.settings = settings
        self.repo = repo
        self.host = host
        self.endpoints = endpoints or []
        self.pub_endpoints = pub_endpoints or []
        self.registry = Registry()
        self.integration: IntegrationIndex | None = None  # set by the shell in a git repository
        self.seq = 0  # publication sequence number, per epoch
        self._last_now: float | None = None
        self._next_lease_check = 0.0  # no live lease can run out before this time
        self.out = Outbox()  # the effects of the call in progress
        self.gates = Gates(
            settings,
            self.out,
            registry=lambda: self.registry,
            record=self._record,
            publish=self._publish,
            session=self._session,
        )
        self.inbox = Inbox(
            self.out,
            registry=lambda: self.registry,
            record=self._record,
            publish=self._publish,
            session=self._session,
            check_name=check_agent_name,
        )
        self._counts = dict.fromkeys(CoreStatistics.__struct_fields__, 0)
        # session -> req -> (peer, request, answer): a request retried after a timeout
        # (same peer, session, req and content) gets its first answer again, not a second
        # grant.  Bounded per session; dropped when the session ends.
        self._answers: dict[str, dict[int, tuple[Any, m.Message, m.Reply]]] = {}
        # Per session, the branches its worktree had checked out when it wrote (intents):
        # its commits may be on any of them, not only the one checked out at release.
        self._wrote_on: dict[str, list[str]] = {}
        self._revoked: dict[str, str] = {}  # session -> what a restart revoked, said when it resumes

    # ================================================================ entry points

    def start(
        self,
        history: list[Record],
        now: float,
        *,
        pid: int = 0,
        snapshot: Snapshot | None = None,
        times: list[float] | None = None,
        wall: float = 0.0,
    ) -> list[Effect]:
        """Rebuild the registry from the ledger (the snapshot, then the records after
        it), then open a new epoch.

        Every session the ledger shows live gets a fresh lease from ``now``; local pids
        are watched again (an exited one ends its session at once).  ``times`` are the
        records' ledger (wall-clock) times and ``wall`` is ``now`` on that clock: what
        ``status`` shows as a grant's or an agent's time comes from them."""
        self.registry = _rebuilt(self.registry if snapshot is None else None, history, now, snapshot, times, wall)
        self._last_now = now
        epoch = self.registry.epoch + 1
        self._record(
            rec.CoordinatorStarted(
                epoch=epoch,
                mode=self.settings.mode,
                pid=pid,
                endpoints=self.endpoints,
                live_agents=sum(1 for a in self.registry.agents.values() if a.live),
                claims=len(self.registry.claims),
            )
        )
        self._revoke_conflicts()
        for agent in self.registry.agents.values():
            if agent.live and agent.pid is not None and agent.host == self.host:
                self.out.append(WatchPid(session=agent.session, pid=agent.pid, pid_started=agent.pid_started))
        return self._flush()

    def _revoke_conflicts(self) -> None:
        """Claims restored from the ledger that this (stricter) mode would never have
        granted together: the oldest grant of each conflict stays, the others are
        revoked, with the reason in the ledger and a publication to their holders."""
        mode = self.settings.mode
        groups: dict[tuple[str, int], list[tuple[ClaimEntry, ClaimEntry]]] = {}
        for entry, kept in policy.restart_revocations(self.registry, mode):
            groups.setdefault((entry.agent, entry.token), []).append((entry, kept))
        for (holder, token), pairs in groups.items():
            kept = pairs[0][1]
            reason = (
                f"revoked at restart in {mode} mode: conflicts with {kept.agent}'s older grant of "
                f"{kept.pattern.text} ({kept.access}, token {kept.token})"
            )
            record = rec.ClaimReleased(
                agent=holder, session=pairs[0][0].session, token=token,
                patterns=[e.pattern.text for e, _ in pairs], reason=reason, revoked=True,
            )
            self._record(record)
            self._publish(rec.ClaimReleased.KIND, holder, {"token": token, **rec.data_of(record)})
            # Its client is not subscribed yet at start-up: it hears it on resuming too.
            self._revoked[pairs[0][0].session] = f"{holder}'s claim on {', '.join(record.patterns)} was {reason}"
            self._counts["releases"] += 1  # the shell logs revoked releases

    def receive(self, peer: Any, message: m.Message, now: float) -> list[Effect]:
        self._advance(now)
        self._counts["messages"] += 1
        handler = self._HANDLERS.get(type(message))
        req = getattr(message, "req", 0)
        session = getattr(message, "session", None) if req and type(message) in _RETRYABLE else None
        if session is not None:
            kept = self._answers.get(session, {}).get(req)
            if kept is not None and kept[0] == peer and kept[1] == message:
                self._counts["retries"] += 1
                self._reply(peer, kept[2])
                return self._flush()
        try:
            if handler is None:
                raise PeerError("unknown_type", f"{type(message).__name__} is not a request")
            handler(self, peer, message, now)
        except PeerError as exc:
            # Handlers validate before they record, so a refused message changes nothing.
            if self.out.recorded_since_mark():
                raise LocalError(f"{type(message).__name__} handler recorded before refusing") from exc
            self._counts["errors"] += 1
            self.out.append(Send(peer, m.Error(req=req, code=exc.code, message=exc.message)))
        except Exception as exc:  # a bug: answer it, keep serving everyone else
            # Records already emitted were applied to the registry: they stay in the
            # output so the ledger still says exactly what the registry holds.
            self._counts["errors"] += 1
            self.out.append(Bug(text=traceback.format_exc()))
            self.out.append(Send(peer, m.Error(req=req, code="internal", message=f"the coordinator hit a bug handling {type(message).__name__}: {exc!r} (see coordinator.log)")))
        if session is not None:
            self._keep_answer(peer, session, message)
        return self.out.flush()

    def _keep_answer(self, peer: Any, session: str, message: m.Request) -> None:
        """Remember this request's answer (not an error) for a retry of it."""
        effects, req = self.out.effects, message.req
        for index in range(len(effects) - 1, self.out.mark - 1, -1):  # the answer is usually the last effect
            effect = effects[index]
            if type(effect) is Send and effect.peer == peer and getattr(effect.message, "req", None) == req:
                answer = effect.message
                break
        else:
            return
        if type(answer) is m.Error or session not in self.registry.sessions:
            return
        kept = self._answers.get(session)
        if kept is None:
            kept = self._answers[session] = {}
        elif req in kept:
            del kept[req]  # kept again below, as the newest
        kept[req] = (peer, message, answer)
        if len(kept) > ANSWERS_KEPT:
            del kept[next(iter(kept))]  # the oldest

    def reject(self, peer: Any, error: PeerError, req: int = 0) -> list[Effect]:
        """A frame the shell could not even decode."""
        self._counts["errors"] += 1
        return [Send(peer, m.Error(req=req, code=error.code, message=error.message))]

    def restore(
        self, history: list[Record], now: float, snapshot: Snapshot | None = None, times: list[float] | None = None, wall: float = 0.0
    ) -> None:
        """The ledger refused a batch: go back to exactly what it holds.  The refused
        batch's records were applied to the registry but never written, so the registry
        is rebuilt from the ledger, as at start-up (leases run from ``now``), and answers
        kept for retries are forgotten (some named grants that never happened)."""
        registry = _rebuilt(Registry(), history, now, snapshot, times, wall)
        # Session ids are epoch.counter and the ledger does not hold the counter: keep
        # counting, or a new session would get the id of a live one.
        registry.session_counter = max(registry.session_counter, self.registry.session_counter)
        self.registry = registry
        self._answers.clear()
        self.out.flush()
        self._last_now = now
        self._next_lease_check = 0.0

    def storage_condition(self, error: str | None) -> list[Effect]:
        """Publish that the ledger cannot be written (``error``), or can again (None)."""
        self._publish("coordinator.storage", None, {"error": error or "", "writable": error is None})
        return self._flush()

    def announce(self, kind: str, agent: str | None, data: dict[str, Any]) -> list[Effect]:
        """Publish something the shell decided (e.g. a remote key refused), in sequence."""
        self._publish(kind, agent, data)
        return self._flush()

    def process_exited(self, session: str, now: float, detail: str = "") -> list[Effect]:
        """The shell saw an agent's watched local process exit: gone, paths free at once."""
        self._advance(now)
        agent = self.registry.sessions.get(session)
        if agent is not None and agent.live:
            reason = f"process {agent.pid} exited" + (f" ({detail})" if detail else "")
            self._end(agent, lifecycle.LEFT, reason, now)
        return self._flush()

    def tick(self, now: float) -> list[Effect]:
        """Expire what is due at ``now``: silent agents, one-shot TTLs, claim TTLs, holds."""
        self._advance(now)
        reg = self.registry
        if now >= self._next_lease_check:  # leases only move later, so nothing is due before
            self._next_lease_check = float("inf")
            for agent in list(reg.agents.values()):
                if not agent.live:
                    continue
                limit = self._lease_of(agent)
                silent = now - agent.last_seen
                if silent <= limit:
                    self._next_lease_check = min(self._next_lease_check, agent.last_seen + limit)
                elif agent.kind == "oneshot":
                    self._end(agent, lifecycle.SILENT, f"one-shot session TTL of {agent.ttl:g}s ran out", now)
                else:
                    self._end(agent, lifecycle.SILENT, f"no heartbeat for {silent:.1f}s", now)
        for entry in list(reg.expiring.values()):
            if entry.expires_at <= now:
                self._release([entry], rec.ClaimExpired, "claim TTL ran out", hold_for=0.0)
        reg.drop_expired_holds(now)
        if reg.edit_batches and self.settings.verify_policy == "after-each-edit-batch":
            self.gates.verify_edit_batches(now)
        self._forget_old_agents()
        return self._flush()

    # -- what the shell's job runner reports back (each one a ledger record first)

    def job_result(self, job: str, kind: str, agent: str | None, result: dict[str, Any], now: float) -> list[Effect]:
        """One probe's result within a job."""
        self._advance(now)
        self.gates.job_result(job, kind, agent, result)
        return self._flush()

    def job_finished(self, job: str, kind: str, gate: m.Gate, now: float) -> list[Effect]:
        self._advance(now)
        self.gates.job_finished(job, kind, gate)
        return self._flush()

    def decide_rules(
        self, job: str, findings: list[Finding], rules: RuleTable, now: float, recent: list[tuple[float, Finding]] = ()
    ) -> RuleDecisions:
        """The rules' responses to a job's findings (``recent``: earlier batches' findings,
        for rules with ``within``), each recorded as decided."""
        self._advance(now)
        responses = self.gates.decide_rules(job, findings, rules, now, recent)
        return RuleDecisions(responses, self._flush())

    def queue_task(self, agent: str | None, task: str, because: str, now: float) -> list[Effect]:
        """A rule's ``queue_task`` response: a task for ``agent`` (coordinator/inbox.py)."""
        self._advance(now)
        self.inbox.queue_task(agent, task, because, by="rule")
        return self._flush()

    def note(self, record: Record, now: float) -> list[Effect]:
        """Record and publish something a job did (a rule's response, a plan transition)."""
        self._advance(now)
        self.gates.note(record)
        return self._flush()

    def stopped(self, reason: str) -> list[Effect]:
        """The shell is about to stop serving: say so in the ledger."""
        self._record(rec.CoordinatorStopped(reason=reason))
        self._publish("coordinator.stopped", None, {"reason": reason})
        return self._flush()

    def _lease_of(self, agent: Agent) -> float:
        """Seconds of silence this agent may have: its one-shot TTL, or heartbeat x liveness
        (a one-shot session bound to a pid has no TTL: only the pid's exit ends it)."""
        if agent.kind == "oneshot":
            return float("inf") if agent.ttl is None else agent.ttl
        return self.settings.silence_limit

    def statistics(self) -> CoreStatistics:
        return CoreStatistics(**self._counts)

    # ================================================================ plumbing

    def _flush(self) -> list[Effect]:
        return self.out.flush()

    def _record(self, record: Record) -> Record:
        self.registry.apply(record, self._last_now or 0.0)
        self.out.append(record)
        return record

    def _publish(self, kind: str, agent: str | None, data: dict[str, Any]) -> None:
        self.seq += 1
        self._counts["publications"] += 1
        pub = m.Publication(seq=self.seq, epoch=self.registry.epoch, kind=kind, agent=agent, data=data)
        self.out.append(Publish(kind=kind, message=pub))

    def _reply(self, peer: Any, message: m.Reply) -> None:
        self.out.append(Send(peer, message))

    def keep_time(self, now: float) -> None:
        """Move the clock on without recording anything: what the shell's ticker does
        while the ledger cannot be written (nothing may expire).  Without it the quiet
        looked like a stalled loop: the next message recorded a pause whose commit
        failed, and that message (a ``status``, which must be answered) was refused."""
        self._last_now = now

    def _advance(self, now: float) -> None:
        """Notice a stalled event loop (SIGSTOP, a long GC, a suspended VM): the time it
        stood still is nobody's silence, so every lease is extended by it."""
        last = self._last_now
        self._last_now = now
        # Run on every message: out.begin_message() and ``gap > max(heartbeat, 0.25)``,
        # written out without their calls.
        out = self.out
        out.mark = len(out.effects)
        if last is not None and now - last > self.settings.heartbeat and now - last > 0.25:
            self._counts["pauses"] += 1
            self._record(rec.CoordinatorPaused(gap=round(now - last, 3)))
            self.out.begin_message()

    # ================================================================ sessions

    def _session(self, session: str, now: float) -> Agent:
        agent = self.registry.sessions.get(session)
        if agent is None:
            raise PeerError("unknown_session", f"session {session!r} is not known here; say hello again")
        if not agent.live:
            raise PeerError(
                "session_expired",
                f"session {session} of {agent.name} is {agent.state} ({agent.reason}); "
                "its claims were released: open a new session",
            )
        self.registry.touch(agent, now)
        if self._revoked:
            self._tell_revoked(agent)
        return agent

    def _tell_revoked(self, agent: Agent) -> str:
        """A holder whose claims a restart revoked hears it (a ``notice`` to it, and the
        notice of a resumed welcome) on its first message after the restart: at
        start-up nobody is subscribed yet."""
        text = self._revoked.pop(agent.session, "")
        if text:
            self._publish("notice", agent.name, {"message": text})
        return text

    def _open(self, msg: m.Hello, now: float, notice: str = "") -> Agent:
        reg = self.registry
        reg.session_counter += 1
        session = f"{reg.epoch}.{reg.session_counter}"
        ttl = None
        if msg.kind == "oneshot" and (msg.pid is None or msg.host != self.host):
            ttl = msg.ttl or self.settings.oneshot_ttl
        self._record(
            rec.AgentJoined(
                agent=msg.agent,
                session=session,
                kind=msg.kind,
                worktree=msg.worktree,
                host=msg.host,
                pid=msg.pid,
                pid_started=msg.pid_started,
                ttl=ttl,
                notice=notice or msgspec.UNSET,
            )
        )
        agent = reg.sessions[session]
        self._next_lease_check = min(self._next_lease_check, now + self._lease_of(agent))
        if msg.pid is not None and msg.host == self.host:
            self.out.append(WatchPid(session=session, pid=msg.pid, pid_started=msg.pid_started))
        self._publish("agent.joined", agent.name, {"session": session, "kind": agent.kind, "worktree": agent.worktree})
        return agent

    def _welcome(self, peer, msg: m.Hello, agent: Agent, *, resumed: bool, notice: str = "") -> None:
        s = self.settings
        self._reply(
            peer,
            m.Welcome(
                req=msg.req,
                session=agent.session,
                agent=agent.name,
                epoch=self.registry.epoch,
                mode=s.mode,
                heartbeat=s.heartbeat,
                liveness=s.liveness,
                pub=self.pub_endpoints,
                resumed=resumed,
                notice=notice,
            ),
        )

    def _end(self, agent: Agent, event: str, reason: str, now: float) -> None:
        """End a session as the lifecycle table says (lifecycle.py): stale (may still run:
        its paths are held) or gone (free now).  An illegal event raises first."""
        step = lifecycle.transition(agent.state, event)
        self._record(step.record(agent=agent.name, session=agent.session, reason=reason))
        kind = step.record.KIND
        self._counts[step.to] += 1
        hold_for = self.settings.lock_delay if step.hold else 0.0
        self._answers.pop(agent.session, None)
        entries = [e for e in self.registry.entries_of(agent.name) if e.session == agent.session]
        self._release(entries, step.release, f"{agent.name}: {reason}", hold_for)
        self._wrote_on.pop(agent.session, None)
        if entries and agent.worktree and agent.host == self.host:  # the shell looks for uncommitted work
            self.out.append(CheckUncommitted(session=agent.session, worktree=agent.worktree, patterns=sorted({e.pattern.text for e in entries})))
        if agent.pid is not None:
            self.out.append(UnwatchPid(session=agent.session))
        self._publish(kind, agent.name, {"session": agent.session, "reason": reason, "lock_delay": hold_for})

    def _forget_old_agents(self) -> None:
        """Keep at most ``max_dead_agents`` ended sessions around for ``status``."""
        reg = self.registry
        if len(reg.sessions) <= self.settings.max_dead_agents:  # cheap: cannot be too many dead
            return
        dead = [a for a in reg.sessions.values() if not a.live]
        excess = len(dead) - self.settings.max_dead_agents
        if excess > 0:
            dead.sort(key=lambda a: a.last_seen)
            self._record(rec.AgentForgotten(sessions=[a.session for a in dead[:excess]]))

    # ================================================================ grants

    def _grant(self, agent: Agent, texts: list[str], access: str, ttl: float | None, *, auto: bool) -> int:
        """Grant ``texts`` (canonical pattern texts, in the record as given) to ``agent``."""
        reg = self.registry
        token = reg.next_token
        if token > reg.reserved_until:
            self._record(rec.TokensReserved(upto=token + TOKEN_RESERVATION - 1))
        self._record(
            rec.ClaimGranted(
                agent=agent.name,
                session=agent.session,
                token=token,
                patterns=texts,
                access=access,
                ttl=ttl,
                auto=auto,
            )
        )
        self._counts["grants"] += 1
        return token

    def _release(
        self, entries: list[ClaimEntry], released: type[rec.ClaimReleased | rec.ClaimExpired], reason: str, hold_for: float, **extra: Any
    ) -> None:
        """Release entries, one ledger record per (holder, token)."""
        groups: dict[tuple[str, int], list[ClaimEntry]] = {}
        if len(entries) == 1:  # the usual release: one group, without building it
            groups[entries[0].agent, entries[0].token] = entries
        else:
            for entry in entries:
                groups.setdefault((entry.agent, entry.token), []).append(entry)
        for (holder, token), group in groups.items():
            patterns = [e.pattern.text for e in group]
            record = released(agent=holder, session=group[0].session, token=token, patterns=patterns, reason=reason, hold_for=hold_for, **extra)
            self._record(record)
            self._publish(released.KIND, holder, {"token": token, **rec.data_of(record)})
            self._counts["releases"] += 1
            if not extra.get("forced"):
                self._hold_unmerged(holder, group[0].session, group)

    # ================================================================ merge holds

    def _hold_unmerged(self, holder: str, session: str, released: list[ClaimEntry]) -> None:
        """Released paths with commits on the holder's branch that main lacks stay held."""
        index = self.integration
        if index is None:
            return
        agent = self.registry.sessions.get(session)
        if agent is None or not agent.worktree:
            return
        current = index.worktree_branch.get(agent.worktree)
        branches = dict.fromkeys([b for b in (current, *self._wrote_on.get(session, ())) if b and b != index.branch])
        done: set[str] = set()  # a path is held once, for the first branch (the one checked out) that has it
        for branch in branches:
            found = mergeholds.held_paths(index.unmerged.get(branch, {}), [e.pattern for e in released])
            held = self.registry.merge_holds_by_path
            found = {
                path: commits for path, commits in found.items()
                if path not in done and not (path in held and held[path].holder == holder and set(commits) <= set(held[path].commits))
            }
            done.update(found)
            if not found:
                continue
            record = rec.MergeHeld(
                agent=holder, session=session, paths={p: list(c) for p, c in sorted(found.items())}, branch=branch, target=index.short_name
            )
            self._record(record)
            self._publish(rec.MergeHeld.KIND, holder, rec.data_of(record))

    def _note_branch(self, agent: Agent) -> None:
        """Remember the branch the agent's worktree has checked out as it writes."""
        index = self.integration
        branch = index.worktree_branch.get(agent.worktree) if index is not None and agent.worktree else None
        if branch and branch != index.branch:
            seen = self._wrote_on.setdefault(agent.session, [])
            if branch not in seen:
                seen.append(branch)
                del seen[:-WROTE_ON_KEPT]

    def _merge_conflicts(self, name: str, pattern: Pattern) -> list[m.Conflict]:
        reg = self.registry
        if not reg.merge_holds_by_path:  # the usual case: skip the index walk
            return []
        return [mergeholds.conflict(h) for _, h in reg.merge_holds.overlapping(pattern) if h.holder != name]

    def _free_merge_holds(self, holds: list, reason: str, **extra: Any) -> None:
        by_holder: dict[tuple[str, str], list] = {}
        for hold in holds:
            by_holder.setdefault((hold.holder, hold.branch), []).append(hold)
        for (holder, branch), group in by_holder.items():
            record = rec.MergeFreed(agent=holder, paths=sorted(h.path.text for h in group), branch=branch, reason=reason, **extra)
            self._record(record)
            self._publish(rec.MergeFreed.KIND, holder, rec.data_of(record))

    def pending_merge_commits(self) -> set[str]:
        """Commits that merge holds wait for (the shell asks git which reached main)."""
        return {c for h in self.registry.merge_holds_by_path.values() for c in h.commits}

    def merge_hold_versions(self) -> dict[str, tuple[str, str, str]]:
        """Per merge hold (its path's text): the file's name, its branch and its newest
        held commit: the shell compares that version of the file with main's."""
        return {
            text: ("/".join(h.path.names), h.branch, h.commits[0])
            for text, h in self.registry.merge_holds_by_path.items() if h.commits
        }

    def commits_merged(self, merged: set[str], now: float, same: set[str] = frozenset()) -> list[Effect]:
        """The shell saw these commits reach the integration branch, and main have the
        files of the holds ``same`` (their paths' texts) as their branches have them:
        free the holds all of whose commits did, then those (a squash or rebase merge)."""
        self._advance(now)
        holds = list(self.registry.merge_holds_by_path.values())
        done = [h for h in holds if set(h.commits) <= merged]
        if done:
            self._free_merge_holds(done, f"merged into {done[0].target}")
        copied = [h for h in holds if h.path.text in same and h not in done]
        if copied:
            self._free_merge_holds(copied, f"{copied[0].target} has its changes (a squash or rebase merge)")
        return self._flush()

    # ================================================================ landings

    def _on_land(self, peer, msg: m.Land, now: float) -> None:
        """Queue a branch for landing on the integration branch (landing.py runs it)."""
        index = self.integration
        if index is None:
            raise PeerError("bad_request", "this coordinator does not serve a git repository: there is nothing to land on")
        branch = msg.branch if msg.branch.startswith("refs/") else f"refs/heads/{msg.branch}"
        if not branch.startswith("refs/heads/"):
            raise PeerError("bad_request", f"{msg.branch!r} is not a branch (refs/heads/NAME)")
        if not _BRANCH.fullmatch(branch[len("refs/heads/") :]) or ".." in branch:
            raise PeerError(  # git allows more; what reaches git's command lines here is kept plain
                "bad_request",
                f"{branch[len('refs/heads/') :]!r}: lockstep land takes branch names of up to 200 ASCII letters, "
                "digits and . _ @ + / - (rename it: git branch -m)",
            )
        if branch == index.branch:
            raise PeerError("bad_request", f"{index.short_name} is the integration branch itself: land another branch onto it")
        if not is_commit_id(msg.head):
            raise PeerError("bad_request", f"head {msg.head!r} is not a commit id")
        agent = None if msg.session is None else self._session(msg.session, now)
        job = self.gates._open_job("land", agent, msg, cwd=msg.cwd)
        record = rec.LandQueued(
            agent=agent.name if agent else None, session=agent.session if agent else None, job=job, branch=branch,
            target=index.short_name, head=msg.head, cwd=msg.cwd,
        )
        self._record(record)
        self._publish(record.KIND, record.agent, rec.data_of(record))
        self._reply(peer, m.Accepted(req=msg.req, job=job, kind="land"))

    def _on_verify(self, peer, msg: m.Verify, now: float) -> None:
        if not (msg.turn_end and self.settings.land_required and self._land_gate(peer, msg, now)):
            self.gates.on_verify(peer, msg, now)

    def _land_gate(self, peer, msg: m.Verify, now: float) -> bool:
        """The turn-end gate under ``[land] required`` (landgate.py); False: the verify
        gate decides."""
        if msg.session is None or not self.settings.turn_gate:
            return False
        agent = self._session(msg.session, now)
        step = land_stop(self.registry, self.integration, agent.name, msg)
        if step.action == "verify":
            return False
        if step.action == "join":
            self._reply(peer, m.Accepted(req=msg.req, job=step.job, kind="land"))
        elif step.action == "land":
            self._on_land(peer, m.Land(req=msg.req, branch=msg.branch, head=msg.head, session=msg.session, cwd=msg.cwd, venv=msg.venv), now)
        else:
            record = rec.StopDecided(agent=agent.name, session=agent.session, verdict=step.verdict, reason=step.reason, tree=msg.tree)
            self._record(record)
            self._publish(record.KIND, agent.name, rec.data_of(record))
            self._reply(peer, m.Gate(req=msg.req, subject="stop", verdict=step.verdict, reason=step.reason, agent=agent.name, tree=msg.tree))
        return True

    def landing_held(self, agent: str | None, changed: list[str], now: float) -> list[str]:
        """What others hold among the files a landing would change on the integration
        branch, one "PATH (reason)" each: live claims, the lock delay of a stale holder's,
        merge holds.  Landing over them changes a file under its holder's feet (its base
        goes stale, its own landing conflicts): the guard refuses such a commit or push,
        and a commit made past it (``--no-verify``) must not land by the queue either."""
        name = agent or ""
        found = []
        for path in changed:
            if CONTROL_CHARACTER.search(path):
                continue  # nobody can hold such a name
            pattern = Pattern.parse(escape(path))
            conflicts = policy.hold_conflicts(self.registry, name, pattern, now) + self._merge_conflicts(name, pattern)
            conflicts += policy.claim_conflicts(self.registry, name, pattern, "exclusive")
            found += [f"{path} ({c.reason})" for c in conflicts]
        return found

    def land_finished(self, record: rec.LandLanded | rec.LandRefused, gate: m.Gate, now: float) -> list[Effect]:
        """A landing was decided.  Landed: the agent's claims on the files it changed
        are released and the merge holds of its branch on them freed, at once (the
        refs were read first, so nothing released looks unmerged).  Refused: the agent
        keeps everything; the verdict says what to fix."""
        self._advance(now)
        self._record(record)
        self._publish(record.KIND, record.agent, rec.data_of(record))
        if isinstance(record, rec.LandLanded) and record.changed:
            reason = f"landed on {record.target} in {record.commit[:10]}"
            changed = {escape(path) for path in record.changed}  # git's names, as the patterns naming them
            landed = set(record.commits)
            if record.agent:
                entries = [e for e in self.registry.entries_of(record.agent) if e.pattern.is_literal and e.pattern.text in changed]
                self._release(entries, rec.ClaimReleased, reason, hold_for=0.0)
            holds = [
                h for h in self.registry.merge_holds_by_path.values()
                if h.branch == record.branch and (h.path.text in changed or set(h.commits) <= landed)
            ]
            if holds:
                self._free_merge_holds(holds, reason)
        self.gates.job_finished(record.job, "land", gate)
        return self._flush()

    # ================================================================ handlers

    def _on_hello(self, peer, msg: m.Hello, now: float) -> None:
        if msg.v != m.PROTOCOL_VERSION:
            raise PeerError("version", f"protocol version {msg.v} is not supported (this coordinator speaks {m.PROTOCOL_VERSION})")
        check_agent_name(msg.agent)
        if msg.repo and self.repo and msg.repo != self.repo:
            raise PeerError("wrong_repo", f"this coordinator serves {self.repo}, not {msg.repo}")
        _check_ttl(msg.ttl)
        _check_pid(msg.pid)
        live = self.registry.live_agent(msg.agent)
        if live is None and len(self.registry.sessions) >= MAX_LIVE_SESSIONS:  # a new session would open
            if sum(a.live for a in self.registry.sessions.values()) >= MAX_LIVE_SESSIONS:
                raise PeerError(
                    "refused", f"{MAX_LIVE_SESSIONS:,} sessions are live already: end some (`lockstep status` lists them) before opening more"
                )
        if msg.session is not None:
            if live is not None and live.session == msg.session:
                self.registry.touch(live, now)
                self._welcome(peer, msg, live, resumed=True, notice=self._tell_revoked(live))
                return
            old = self.registry.sessions.get(msg.session)
            why = f"{old.state}: {old.reason}" if old is not None else "unknown to this coordinator"
            if live is not None:
                self._follow_renewal(peer, msg, live, why, now)
                return
            notice = f"session {msg.session} expired ({why}); opened a new session with no claims"
            agent = self._open(msg, now, notice)
            self._welcome(peer, msg, agent, resumed=False, notice=notice)
            return
        if live is not None:
            if msg.kind != "oneshot":
                raise PeerError("agent_live", _live_message(live))
            self.registry.touch(live, now)
            self._welcome(peer, msg, live, resumed=True, notice=self._tell_revoked(live))
            return
        agent = self._open(msg, now)
        self._welcome(peer, msg, agent, resumed=False)

    def _follow_renewal(self, peer, msg: m.Hello, live: Agent, why: str, now: float) -> None:
        """A client comes back with an ended session while its agent lives on in another.
        An attached client (a one-shot hello: a CLI call, an MCP server, a library user
        beside ``lockstep run``) follows the live session; a long-lived client finding
        only a one-shot session (a CLI call opened it while this client was away) takes
        it over with its claims.  Anything else is another process using the name."""
        ended = f"session {msg.session} ended ({why}); its claims were released"
        if msg.kind == "oneshot":
            self.registry.touch(live, now)
            self._welcome(peer, msg, live, resumed=False, notice=f"{ended}; now acting in {live.name}'s live session {live.session}")
            return
        if live.kind != "oneshot":
            raise PeerError("agent_live", _live_message(live))
        local_pid = msg.pid if msg.host == self.host else None
        if live.pid is not None and local_pid is None:
            self.out.append(UnwatchPid(session=live.session))  # the returning client's life bounds it now
        self._record(
            rec.AgentAdopted(
                agent=live.name,
                session=live.session,
                kind=msg.kind,
                pid=msg.pid,
                pid_started=msg.pid_started,
                previous=msg.session,
            )
        )
        self.registry.touch(live, now)
        self._next_lease_check = min(self._next_lease_check, now + self._lease_of(live))
        if local_pid is not None:
            self.out.append(WatchPid(session=live.session, pid=msg.pid, pid_started=msg.pid_started))
        notice = f"{ended}; took over {live.name}'s one-shot session {live.session} with its claims"
        self._welcome(peer, msg, live, resumed=False, notice=notice)

    def _on_heartbeat(self, peer, msg: m.Heartbeat, now: float) -> None:
        self._session(msg.session, now)  # one-way unless the session is not live...
        if msg.echo:  # ...or the client listens for ours (it learns we are gone)
            self._reply(peer, m.Ok(req=msg.req))

    def _on_watch(self, peer, msg: m.Watch, now: float) -> None:
        agent = self._session(msg.session, now)
        _check_pid(msg.pid)
        self._record(rec.AgentWatched(agent=agent.name, session=agent.session, pid=msg.pid, pid_started=msg.pid_started))
        if agent.host == self.host:
            self.out.append(WatchPid(session=agent.session, pid=msg.pid, pid_started=msg.pid_started))
        self._reply(peer, m.Ok(req=msg.req, message=f"watching pid {msg.pid}"))

    def _on_claim(self, peer, msg: m.Claim, now: float) -> None:
        agent = self._session(msg.session, now)
        patterns = _parse_new_patterns(msg.paths)
        if msg.ttl is not None:
            _check_ttl(msg.ttl)
        access = "shared" if msg.shared else "exclusive"
        stale = self._stale_bases([p for p in patterns if p.is_literal], msg.head, msg.merging) if msg.head is not None else []
        if stale and self._stale_blocks():
            self._refuse_claim(peer, msg, agent, patterns, [], "; ".join(_stale_reasons(stale)), stale)
            return
        held = self._held_exclusively(agent, patterns) if access == "exclusive" else None
        if held is not None:  # a re-claim: the grant it already has, not a new token
            self._reply(peer, m.Granted(req=msg.req, token=held, patterns=[p.text for p in patterns]))
            return
        if len(self.registry.claims) + len(patterns) > MAX_LIVE_CLAIMS:
            raise PeerError(
                "refused", f"{len(self.registry.claims):,} claims are live (at most {MAX_LIVE_CLAIMS:,}): release some, "
                "or claim folders or globs (src/api/**) instead of their files",
            )
        conflicts = self._conflicts_for(agent.name, patterns, access, now)
        if conflicts and policy.refuses(self.settings.mode, conflicts):
            self._refuse_claim(peer, msg, agent, patterns, conflicts, _summary(conflicts))
            return
        if stale:
            conflicts += [
                m.Conflict(holder=s.author, pattern=s.path, access="stale-base", reason=text)
                for s, text in zip(stale, _stale_reasons(stale))
            ]
        texts = [p.text for p in patterns]
        token = self._grant(agent, texts, access, msg.ttl, auto=False)
        data = {"token": token, "patterns": texts, "access": access}
        if conflicts:
            conflicts = conflicts[:CONFLICTS_LISTED]
            data["warnings"] = [msgspec.to_builtins(c) for c in conflicts]
        self._publish("claim.granted", agent.name, data)
        self._reply(peer, m.Granted(req=msg.req, token=token, patterns=texts, warnings=conflicts))

    def _held_exclusively(self, agent: Agent, patterns: list[Pattern]) -> int | None:
        """The token of the one exclusive grant of this session holding exactly these
        patterns, if there is one (claiming them again changes nothing)."""
        tokens = set()
        for pattern in patterns:
            entry = self.registry.entry_named(agent.name, pattern.text)
            if entry is None or entry.access != "exclusive" or entry.session != agent.session:
                return None
            tokens.add(entry.token)
        return tokens.pop() if len(tokens) == 1 else None

    def _refuse_claim(self, peer, msg, agent, patterns, conflicts, reason, stale=()) -> None:
        total = len(conflicts) if len(conflicts) > CONFLICTS_LISTED else 0  # the reason says how many more
        conflicts = conflicts[:CONFLICTS_LISTED]
        self._counts["refusals"] += 1
        if msg.retry:  # `claim --wait` retrying: its first refusal is in the ledger already
            self._reply(peer, m.Refused(req=msg.req, reason=reason, conflicts=conflicts, stale=list(stale), conflicts_total=total))
            return
        record = rec.ClaimRefused(
            agent=agent.name,
            session=agent.session,
            patterns=[p.text for p in patterns],
            reason=reason,
            conflicts=conflicts,
            stale=list(stale) if stale else msgspec.UNSET,
        )
        self._record(record)
        self._publish(rec.ClaimRefused.KIND, agent.name, msgspec.to_builtins(rec.data_of(record)))
        self._reply(peer, m.Refused(req=msg.req, reason=reason, conflicts=conflicts, stale=list(stale), conflicts_total=total))

    def _stale_bases(self, paths: list[Pattern], head: str | None, merging: list[str] | tuple[()] = ()) -> list[m.StaleBase]:
        """The paths whose newest change on the integration branch ``head`` lacks.  With a
        merge in progress (``merging``: the commits it brings) the next commit has them all
        as parents: a change one of them has is in it, so only what all lack is stale."""
        index = self.integration
        if len(merging) > m.MERGING_LIMIT:
            raise PeerError("bad_request", f"a merge brings at most {m.MERGING_LIMIT} commits, not {len(merging)}")
        for commit in (head, *merging):
            if commit is not None and not is_commit_id(commit):
                raise PeerError("bad_request", f"head must be a full commit id (40 or 64 hex digits), not {commit[:80]!r}")
        if index is None or head is None or self.settings.fresh_base == "off":
            return []
        found = []
        for path in paths:
            change = index.stale(path.text, head)
            if change is not None and all(index.stale(path.text, commit) is not None for commit in merging):
                found.append(m.StaleBase(path=path.text, commit=change.commit, author=change.author, subject=change.subject, branch=index.short_name))
        return found

    def _stale_blocks(self) -> bool:
        """A stale base blocks in strict modes; parallel-warn mode only warns."""
        return self.settings.fresh_base == "block" and self.settings.mode != "parallel-warn"

    def _conflicts_for(self, name: str, patterns: list[Pattern], access: str, now: float) -> list[m.Conflict]:
        reg = self.registry
        conflicts: list[m.Conflict] = []
        # Holds and merge holds are rare: while there are none, their (empty) lists of
        # conflicts are not asked for at all.
        holds, merge_holds = len(reg.holds), reg.merge_holds_by_path
        for pattern in patterns:
            if holds:
                conflicts += policy.hold_conflicts(reg, name, pattern, now)
            if merge_holds:
                conflicts += self._merge_conflicts(name, pattern)
            conflicts += policy.claim_conflicts(reg, name, pattern, access)
        if self.settings.mode == "serial":
            conflicts += policy.serial_conflicts(reg, name)
        return conflicts

    def _on_release(self, peer, msg: m.Release, now: float) -> None:
        if msg.force:
            self._force_release(peer, msg)
            return
        if msg.session is None:
            raise PeerError("bad_request", "release needs a session (name an agent), or --force for an operator release")
        agent = self._session(msg.session, now)
        if msg.all and msg.paths:  # a caller naming some paths must not lose every claim
            raise PeerError("bad_request", "all releases every claim: name the paths, or all, not both")
        if msg.all:
            entries = self.registry.entries_of(agent.name)
        else:
            if not msg.paths:
                raise PeerError("bad_request", "name the paths to release, or use --all")
            entries, missing = [], []
            for pattern in _parse_patterns(msg.paths):  # (distinct texts)
                entry = self.registry.entry_named(agent.name, pattern.text)  # not a walk of all it holds
                if entry is not None:
                    entries.append(entry)
                else:
                    missing.append(pattern.text)
            if missing:
                held = ", ".join(sorted({e.pattern.text for e in self.registry.entries_of(agent.name)})) or "nothing"
                raise PeerError("bad_request", f"{agent.name} holds no claim on {', '.join(sorted(missing))} (holds: {held})")
        self._release(entries, rec.ClaimReleased, "released by holder", 0.0)
        dirty = self._released_uncommitted(agent, entries, msg.uncommitted or (), "release")
        warning = ""
        if dirty:
            more = f" and {len(dirty) - 5} more" if len(dirty) > 5 else ""
            warning = (
                f"released with uncommitted changes to {', '.join(dirty[:5])}{more} in {agent.worktree or 'its worktree'}: "
                "commit them (and merge) or others will not see them"
            )
        # (one entry, the usual release: its text is the sorted set of texts)
        patterns = [entries[0].pattern.text] if len(entries) == 1 else sorted({e.pattern.text for e in entries})
        self._reply(
            peer,
            m.Released(req=msg.req, patterns=patterns, holders=[agent.name] if entries else [], uncommitted=dirty, warning=warning),
        )

    def _released_uncommitted(self, agent: Agent, entries: list[ClaimEntry], paths, when: str) -> list[str]:
        """Record (and tell the agent) which released paths had uncommitted changes."""
        if not paths:  # the client saw none (or did not look)
            return []
        dirty = touched([e.pattern for e in entries], paths)
        if dirty:
            record = rec.ReleaseUncommitted(
                agent=agent.name, session=agent.session, paths=dirty,
                patterns=sorted({e.pattern.text for e in entries}), worktree=agent.worktree, when=when,
            )
            self._record(record)
            self._publish(rec.ReleaseUncommitted.KIND, agent.name, rec.data_of(record))
        return dirty

    def uncommitted_at_end(self, session: str, patterns: list[str], paths: list[str], now: float) -> list[Effect]:
        """The shell read an ended session's worktree (``CheckUncommitted``): record the
        released paths it found with uncommitted changes."""
        self._advance(now)
        agent = self.registry.sessions.get(session)
        if agent is not None:
            entries = [ClaimEntry(Pattern.parse(p), agent.name, session, 0, "exclusive", now) for p in patterns]
            self._released_uncommitted(agent, entries, paths, "session end")
        return self._flush()

    def _force_release(self, peer, msg: m.Release) -> None:
        if not msg.paths:
            raise PeerError("bad_request", "a forced release names the paths to free")
        if not msg.reason.strip():
            raise PeerError("bad_request", "a forced release needs a reason (it is logged and sent to the holder)")
        entries: dict[int, ClaimEntry] = {}
        merge_holds: dict[int, Any] = {}
        for pattern in _parse_patterns(msg.paths):
            for _, entry in self.registry.claims.overlapping(pattern):
                entries[id(entry)] = entry
            for _, hold in self.registry.merge_holds.overlapping(pattern):
                merge_holds[id(hold)] = hold
        if not entries and not merge_holds:
            raise PeerError("bad_request", f"no live claim or merge hold overlaps {', '.join(msg.paths)}")
        by = msg.by or "operator"
        found = list(entries.values())
        if merge_holds:
            self._free_merge_holds(list(merge_holds.values()), f"abandoned by {by}: {msg.reason}", forced=True, by=by)
        self._release(found, rec.ClaimReleased, f"forced by {by}: {msg.reason}", 0.0, forced=True, by=by)
        holders = sorted({e.agent for e in found})
        for holder in holders:
            lost = sorted(e.pattern.text for e in found if e.agent == holder)
            self._publish("notice", holder, {"message": f"{by} freed your claim on {', '.join(lost)}: {msg.reason}", "patterns": lost})
        freed = sorted({e.pattern.text for e in found} | {h.path.text for h in merge_holds.values()})
        holders = sorted(set(holders) | {h.holder for h in merge_holds.values()})
        self._reply(peer, m.Released(req=msg.req, patterns=freed, holders=holders))

    def _on_abandon(self, peer, msg: m.Abandon, now: float) -> None:
        """An operator gives up on a branch: its merge holds are freed."""
        branch = msg.branch if msg.branch.startswith("refs/") else f"refs/heads/{msg.branch}"
        # a detached HEAD's holds name its commit id, not a branch
        holds = [h for h in self.registry.merge_holds_by_path.values() if h.branch in (branch, msg.branch)]
        if not holds:
            held = sorted({h.short_branch for h in self.registry.merge_holds_by_path.values()})
            raise PeerError("bad_request", f"no merge hold waits for branch {msg.branch!r} (branches with holds: {', '.join(held) or 'none'})")
        by = msg.by or "operator"
        self._free_merge_holds(holds, f"abandoned by {by}: {msg.reason or 'branch abandoned'}", forced=True, by=by)
        self._reply(peer, m.Released(req=msg.req, patterns=sorted(h.path.text for h in holds), holders=sorted({h.holder for h in holds})))

    def _on_intent(self, peer, msg: m.Intent, now: float) -> None:
        agent = self._session(msg.session, now)
        if msg.token is not None and msg.token < 1:
            raise PeerError("bad_request", f"token must be a positive integer (a grant's fencing token, as `lockstep claim` printed it), not {msg.token}")
        self._reply(peer, self._intent(agent, msg.paths, msg.token, msg.head, msg.req, now, msg.merging, msg.maybe))

    def _on_wrote(self, peer, msg: m.Wrote, now: float) -> None:
        """A write seen after the fact: the intent gate as if it had been asked (a free
        path is claimed); paths another agent holds are a ``write.unannounced``, and
        the other paths, written all the same, are decided (claimed) on their own -
        in ``parallel-warn`` mode too, where the batch's verdict is ``warn`` and the
        gate claimed nothing."""
        agent = self._session(msg.session, now)
        # A name with a control character cannot be coordinated (_parse_new_patterns);
        # it must not cost the report the other files the call wrote.
        coordinated = [text for text in msg.paths if not CONTROL_CHARACTER.search(text)] or msg.paths
        decision = self._intent(agent, coordinated, None, msg.head, msg.req, now, msg.merging)
        held = [c for c in decision.conflicts if c.holder != agent.name]
        if held:
            paths = sorted({p for p in decision.paths if any(overlaps(Pattern.parse(c.pattern), Pattern.parse(p)) for c in held)})
            record = rec.WriteUnannounced(
                agent=agent.name, session=agent.session, paths=paths or decision.paths, holders=decision.holders,
                source=msg.source, conflicts=held,
            )
            self._record(record)
            self._publish(record.KIND, agent.name, msgspec.to_builtins(rec.data_of(record)))
            free = [p for p in decision.paths if p not in record.paths]
            if decision.verdict in ("block", "warn") and free and record.paths != decision.paths:
                self._intent(agent, free, None, msg.head, msg.req, now, msg.merging)  # the rest is written too: claim it
        self._reply(peer, decision)

    def _intent(
        self, agent: Agent, texts: list[str], token: int | None, head: str | None, req: int, now: float, merging: list[str] | tuple[()] = (),
        maybe_texts: list[str] | tuple[()] = (),
    ) -> m.Decision:
        """Decide, record and publish one write intent; the reply to send.  ``maybe_texts``:
        files the call may rewrite (a formatter's candidates), decided but never claimed."""
        paths = _parse_new_patterns(texts) if texts or not maybe_texts else []
        maybe = _parse_new_patterns(maybe_texts) if maybe_texts else []
        for path in paths + maybe:
            if not path.is_literal:
                raise PeerError("bad_path", f"an intent names concrete files, not {path.text!r} (a folder or glob)")
        if maybe:
            named = {p.text for p in paths}
            maybe = [p for p in maybe if p.text not in named]
        self._counts["intents"] += 1
        self._note_branch(agent)
        stale = self._stale_bases(paths, head, merging)
        if stale and self._stale_blocks():
            verdict, reason, token, conflicts = "block", "; ".join(_stale_reasons(stale)), None, []
        else:
            outcome = self._decide_intent(agent, paths, token, now, maybe)
            verdict, reason, token, conflicts = outcome.verdict, outcome.reason, outcome.token, outcome.conflicts
            if stale and verdict != "block":
                verdict, reason = "warn", "; ".join(_stale_reasons(stale)) + f" (allowed: {reason})"
        holders = sorted({c.holder for c in conflicts})
        total = len(conflicts) if len(conflicts) > CONFLICTS_LISTED else 0
        conflicts = conflicts[:CONFLICTS_LISTED]
        decision = m.Decision(
            req=req,
            verdict=verdict,
            reason=reason,
            paths=[p.text for p in paths],
            token=token,
            holders=holders,
            conflicts=conflicts,
            stale=stale,
            conflicts_total=total,
            inbox=self.inbox.waiting(agent.name),
        )
        self._record(
            rec.IntentDecided(
                agent=agent.name,
                session=agent.session,
                token=token,
                verdict=verdict,
                reason=reason,
                paths=decision.paths,
                holders=holders,
                conflicts=conflicts,
                stale=stale,
                maybe=len(maybe),
            )
        )
        data = {k: v for k, v in msgspec.to_builtins(decision).items() if k not in ("type", "req")}
        self._publish("intent.decided", agent.name, data)
        return decision

    def _decide_intent(self, agent: Agent, paths: list[Pattern], token: int | None, now: float, maybe: list[Pattern] | tuple[()] = ()) -> IntentOutcome:
        """The intent gate.  Writes are exclusive use of a path; a file the call only
        may rewrite (``maybe``) is in the way of the same holders, but claims nothing."""
        reg, mode = self.registry, self.settings.mode
        if agent.name in reg.blocked and not reg.may_write_while_blocked(agent.name, [p.text for p in [*paths, *maybe]]):
            return IntentOutcome("block", f"{agent.name} is blocked by a rule: {reg.blocked[agent.name]}")
        conflicts: list[m.Conflict] = []
        unowned: list[Pattern] = []
        covering_tokens: list[int] = []
        if token is not None and token >= reg.next_token:  # (tokens are granted in order from 1)
            return IntentOutcome(
                "block", f"token {token} was never granted (every grant so far has a token below {reg.next_token}): fence a write with the token its claim printed"
            )
        for path in paths:
            own, others = policy.intent_view(reg, agent.name, path)
            if token is not None and not any(e.token == token for e in own):
                current = f"your live grant there is token {max(e.token for e in own)}" if own else "you hold no live claim on it"
                reason = f"token {token} is not the current grant of {path.text} to {agent.name} ({current}); it was released, expired or superseded"
                return IntentOutcome("block", reason)
            conflicts += policy.hold_conflicts(reg, agent.name, path, now) + self._merge_conflicts(agent.name, path) + others
            if own:
                covering_tokens.append(token if token is not None else max(e.token for e in own))
            else:
                unowned.append(path)
        in_the_way = len(conflicts)
        for path in maybe:
            conflicts += policy.hold_conflicts(reg, agent.name, path, now) + self._merge_conflicts(agent.name, path) + policy.intent_view(reg, agent.name, path)[1]
        # Held files among the candidates only: the model can run the tool on its own files.
        narrow = " (this call may rewrite them: run it on your own files only)" if len(conflicts) > in_the_way else ""
        if mode == "serial":
            conflicts += policy.serial_conflicts(reg, agent.name)
        if policy.refuses(mode, conflicts):
            return IntentOutcome("block", _summary(conflicts) + narrow, None, conflicts)
        if conflicts:  # parallel-warn: allowed, nothing claimed
            return IntentOutcome("warn", "allowed with conflicts: " + _summary(conflicts) + narrow, None, conflicts)
        granted = None
        if unowned and self.settings.auto_claim and len(reg.claims) + len(unowned) > MAX_LIVE_CLAIMS:
            return IntentOutcome("allow", f"allowed; not claimed: {len(reg.claims):,} claims are live (at most {MAX_LIVE_CLAIMS:,})")
        if unowned and self.settings.auto_claim:
            texts = [p.text for p in unowned]
            granted = self._grant(agent, texts, "exclusive", None, auto=True)
            self._publish("claim.granted", agent.name, {"token": granted, "patterns": texts, "access": "exclusive", "auto": True})
        result_token = granted if granted is not None else (covering_tokens[0] if covering_tokens else None)
        if granted is not None:
            reason = f"allowed; claimed {', '.join(p.text for p in unowned)} for {agent.name} (token {granted})"
        elif unowned:
            reason = "allowed; the path is unclaimed (auto-claim is off)"
        elif paths:
            reason = f"allowed; {agent.name} holds the path"
        else:
            reason = f"allowed; no other agent holds any of the {len(maybe)} file{'s' if len(maybe) != 1 else ''} this call may rewrite"
        return IntentOutcome("allow", reason, result_token)

    def status(self, peer: Any, msg: m.Status, now: float) -> tuple[list[Effect], StatusParts | None]:
        """A status for the shell to finish: everything but the claim rows, which it
        renders from ``parts.entries`` in slices (``sorted_for_status``, ``claim_rows``)
        so that a big status never holds up the other peers' requests.  A bad query
        gives its error and no parts."""
        self._advance(now)
        self._counts["messages"] += 1
        try:
            parts = self._status_parts(msg, now)
        except PeerError as exc:
            self._counts["errors"] += 1
            self._reply(peer, m.Error(req=msg.req, code=exc.code, message=exc.message))
            parts = None
        return self._flush(), parts

    def _on_status(self, peer, msg: m.Status, now: float) -> None:
        parts = self._status_parts(msg, now)
        self._reply(peer, msgspec.structs.replace(parts.reply, claims=claim_rows(sorted_for_status(parts.entries), now)))

    def _status_parts(self, msg: m.Status, now: float) -> StatusParts:
        reg = self.registry
        name = msg.agent
        if name is not None:
            check_agent_name(name)
        query = Pattern.parse(msg.path) if msg.path is not None else None
        agents = sorted((a for a in reg.agents.values() if name is None or a.name == name), key=lambda a: a.name)
        everything = query is None and name is None
        if query is not None:
            entries = [e for _, e in reg.claims.overlapping(query)]
            holds = [h for _, h in reg.holds.overlapping(query)]
            merge_holds = [h for _, h in reg.merge_holds.overlapping(query)]
        else:
            entries = reg.entries_of(name) if name is not None else []  # everything: listed below if it fits
            holds = reg.all_holds()
            merge_holds = list(reg.merge_holds_by_path.values())
        if name is not None:
            entries = [e for e in entries if e.agent == name]
            holds = [h for h in holds if h.former == name]
            merge_holds = [h for h in merge_holds if h.holder == name]
        holds = [h for h in holds if h.until > now]
        claims = len(reg.claims) if everything else len(entries)
        counts = {"agents": len(agents), "claims": claims, "holds": len(holds), "merge_holds": len(merge_holds)}
        listed = _status_size(agents, [], holds, merge_holds) + (
            CLAIM_ROW_BYTES * claims + reg.claim_chars if everything else _claims_size(entries)
        )
        summarised = listed > m.STATUS_LIST_LIMIT
        by_holder: dict[str, int] = {}
        note = ""
        if summarised:
            if everything:
                by_holder = {holder: len(mine) for holder, mine in reg.claims_by_agent.items()}
            else:
                for e in entries:
                    by_holder[e.agent] = by_holder.get(e.agent, 0) + 1
            by_holder = dict(sorted(by_holder.items(), key=lambda kv: (-kv[1], kv[0]))[:HOLDERS_SUMMARISED])
            note = (
                f"{counts['claims']:,} claims, {counts['holds']:,} holds and {counts['merge_holds']:,} merge holds are too many "
                f"to list (about {listed / 1e6:.1f} MB, the limit is {m.STATUS_LIST_LIMIT / 1e6:.1f} MB): only counts are shown; "
                "narrow it down with --agent NAME or --path PATTERN"
            )
            entries, holds, merge_holds = [], [], []
            if _status_size(agents, [], [], []) > m.STATUS_LIST_LIMIT:
                agents = []
        elif everything:
            entries = list(reg.all_entries())
        stats = {"core": msgspec.to_builtins(self.statistics()), "registry": reg.snapshot_counts()}
        reply = m.StatusReply(
            req=msg.req,
            mode=self.settings.mode,
            epoch=reg.epoch,
            endpoints=self.endpoints,
            pub=self.pub_endpoints,
            agents=[
                m.AgentInfo(
                    name=a.name,
                    state=a.state,
                    session=a.session,
                    kind=a.kind,
                    pid=a.pid,
                    worktree=a.worktree,
                    last_seen_ago=round(max(0.0, now - a.seen), 3),
                    reason=a.reason,
                    ttl_left=round(max(0.0, a.ttl - (now - a.last_seen)), 3) if a.live and a.ttl is not None else None,
                )
                for a in agents
            ],
            claims=[],  # rendered from the entries (claim_rows)
            holds=[
                m.HoldInfo(pattern=h.pattern.text, former_holder=h.former, free_in=round(h.until - now, 3))
                for h in sorted(holds, key=lambda h: (h.pattern.text, h.former))
            ],
            merge_holds=[
                m.MergeHoldInfo(path=h.path.text, holder=h.holder, branch=h.short_branch, commits=list(h.commits), reason=h.describe())
                for h in sorted(merge_holds, key=lambda h: h.path.text)
            ],
            seq=self.seq,
            statistics=stats,
            counts=counts,
            summarised=summarised,
            claims_by_holder=by_holder,
            note=note,
        )
        return StatusParts(reply, entries, now)

    def _on_fresh(self, peer, msg: m.Fresh, now: float) -> None:
        """A fresh-base check with no session (the git guard, for a person's commit)."""
        paths = _parse_patterns(msg.paths)
        if not msg.head:
            raise PeerError("bad_request", "fresh needs the worktree's head commit")
        stale = self._stale_bases([p for p in paths if p.is_literal], msg.head, msg.merging)
        if not stale:
            verdict, reason = "allow", "fresh: the integration branch changed none of these paths since this base"
        else:
            verdict, reason = ("block" if self._stale_blocks() else "warn"), "; ".join(_stale_reasons(stale))
        self._reply(peer, m.Decision(req=msg.req, verdict=verdict, reason=reason, paths=[p.text for p in paths], stale=stale))

    def _on_bye(self, peer, msg: m.Bye, now: float) -> None:
        agent = self._session(msg.session, now)
        self._end(agent, lifecycle.LEFT, msg.reason or "bye", now)
        self._reply(peer, m.Ok(req=msg.req, message=f"{agent.name} left; its claims are free"))

    def _on_shutdown(self, peer, msg: m.Shutdown, now: float) -> None:
        self._reply(peer, m.Ok(req=msg.req, message="coordinator stopping"))
        self.out.append(StopServing(reason=msg.reason))

    _HANDLERS = {
        m.Hello: _on_hello,
        m.Heartbeat: _on_heartbeat,
        m.Watch: _on_watch,
        m.Claim: _on_claim,
        m.Release: _on_release,
        m.Intent: _on_intent,
        m.Wrote: _on_wrote,
        m.Status: _on_status,
        m.Fresh: _on_fresh,
        m.Bye: _on_bye,
        m.Shutdown: _on_shutdown,
        m.Abandon: _on_abandon,
        m.Check: lambda core, peer, msg, now: core.gates.on_check(peer, msg, now),
        m.Verify: _on_verify,
        m.Done: lambda core, peer, msg, now: core.gates.on_done(peer, msg, now),
        m.TurnStart: lambda core, peer, msg, now: core.gates.on_turn(peer, msg, now),
        m.PlanRun: lambda core, peer, msg, now: core.gates.on_plan_run(peer, msg, now),
        m.Land: _on_land,
        m.Tasks: lambda core, peer, msg, now: core.inbox.on_tasks(peer, msg, now),
        m.SendText: lambda core, peer, msg, now: core.inbox.on_send(peer, msg, now),
        m.InboxQuery: lambda core, peer, msg, now: core.inbox.on_inbox(peer, msg, now),
        m.Ran: lambda core, peer, msg, now: core.gates.on_ran(peer, msg, now),
    }


class ReplayError(LockstepError):
    """Record ``index`` of a replayed history cannot be applied (a row written into the
    ledger by hand: an absolute path, a pattern no claim could have): no state to serve."""

    def __init__(self, index: int, record: Record, cause: Exception) -> None:
        super().__init__(f"record {index} of the history ({record.KIND}) cannot be replayed: {cause}")
        self.index, self.kind, self.cause = index, record.KIND, cause


def _rebuilt(
    registry: Registry | None, history: list[Record], now: float, snapshot: Snapshot | None, times: list[float] | None, wall: float
) -> Registry:
    """``registry`` (or the snapshot's) with ``history`` applied: leases from ``now``,
    shown times from the records' ledger ``times`` (``wall`` is ``now`` on their clock)."""
    if snapshot is not None:
        registry = Registry.from_snapshot(snapshot, now, wall)
    elif registry is None:
        registry = Registry()
    index = 0
    try:
        if times is None or not wall:
            for index, record in enumerate(history):
                registry.apply(record, now)
        else:
            for index, (record, ts) in enumerate(zip(history, times, strict=True)):
                registry.apply(record, now, now - max(0.0, wall - ts))
    except Exception as exc:  # what the coordinator wrote always applies: this row came from elsewhere
        raise ReplayError(index, history[index], exc) from exc
    return registry


WROTE_ON_KEPT = 16  # branches remembered per session (an agent's branch switches between releases)
HOLDERS_SUMMARISED = 1_000  # agents named in a summarised status (the biggest holders)


def _status_size(agents, entries, holds, merge_holds) -> int:
    """About how many bytes a status listing these would take (msgpack, field names
    included), without building it: each kind's fixed part plus its strings."""
    return (
        sum(130 + len(a.name) + len(a.session) + len(a.worktree or "") + len(a.reason or "") for a in agents)
        + _claims_size(entries)
        + sum(45 + len(h.pattern.text) + len(h.former) for h in holds)
        + sum(60 + len(h.path.text) + len(h.holder) + len(h.short_branch) + 42 * len(h.commits) + 120 for h in merge_holds)
    )


def _claims_size(entries: list[ClaimEntry]) -> int:
    return sum(CLAIM_ROW_BYTES + len(e.pattern.text) + len(e.agent) for e in entries)


class StatusParts(NamedTuple):
    """A status reply without its claim rows, and the entries to list in them (a copy:
    entries never change once granted, so they can be rendered after this turn)."""

    reply: m.StatusReply
    entries: list[ClaimEntry]
    now: float


def sorted_for_status(entries: list[ClaimEntry]) -> list[ClaimEntry]:
    return sorted(entries, key=lambda e: (e.token, e.pattern.text))


def claim_rows(entries: list[ClaimEntry], now: float) -> list[m.ClaimInfo]:
    return [
        m.ClaimInfo(
            pattern=e.pattern.text,
            holder=e.agent,
            token=e.token,
            access=e.access,
            since_ago=round(max(0.0, now - e.granted), 3),
            expires_in=None if e.expires_at is None else round(e.expires_at - now, 3),
        )
        for e in entries
    ]


def _summary(conflicts: list[m.Conflict]) -> str:
    """One sentence naming the first conflicts, and how many more there are."""
    text = policy.summarise(conflicts[:CONFLICTS_LISTED])
    more = len(conflicts) - CONFLICTS_LISTED
    return text + (f"; and {more} more conflicts" if more > 0 else "")


# Requests whose retry must not act twice (a second grant, a second job).
_RETRYABLE = frozenset({m.Claim, m.Release, m.Intent, m.Wrote, m.Watch, m.Check, m.Verify, m.Done, m.PlanRun, m.TurnStart, m.Land, m.Tasks, m.SendText, m.InboxQuery, m.Ran})


def _live_message(agent: Agent) -> str:
    where = f", pid {agent.pid}" if agent.pid else ""
    return f"agent {agent.name} is already live (session {agent.session}{where}, worktree {agent.worktree or '?'}); pick another name or end it first"


def _stale_reasons(stale: list[m.StaleBase]) -> list[str]:
    return [stale_text(s.path, Change(s.commit, s.author, s.subject), s.branch) for s in stale]


def _check_ttl(ttl: float | None) -> None:
    """A TTL is a finite number of seconds, at least ``m.MIN_TTL``: an infinite one would
    show as ``Infinity`` (not JSON) in status, and one of 5e-324 s was granted as a claim
    that had expired before its reply left; no TTL is written as none."""
    if ttl is None:
        return
    if not 0 < ttl < math.inf:
        raise PeerError("bad_request", f"ttl must be positive and finite, not {ttl}")
    if ttl < m.MIN_TTL:
        raise PeerError("bad_request", f"ttl {ttl:g} s is too short: at least {m.MIN_TTL:g} s (it would expire before it is used)")


def _check_pid(pid: int | None) -> None:
    """A pid is a positive pid_t (32 bits): a hello with pid 2**31 made the pid watcher's
    ``os.pidfd_open`` raise OverflowError, which ended the coordinator."""
    if pid is not None and not 0 < pid <= PID_MAX:
        raise PeerError("bad_request", f"pid must be a process id (1 to {PID_MAX}), not {pid}")


def _parse_new_patterns(paths: list[str]) -> list[Pattern]:
    """Patterns a claim or an intent would add: no control characters in them.  Names are
    printed to terminals (status, top, the ledger): an ESC in one would drive the
    reader's terminal.  Git allows such names; nobody means them.  (Releases and
    queries still take them: a ledger written before this check may hold some.)"""
    patterns = _parse_patterns(paths)
    for pattern in patterns:
        if pattern.text.isprintable():  # (in C: the usual name costs no regex search)
            continue
        control = CONTROL_CHARACTER.search(pattern.text)
        if control is not None:
            raise PeerError(
                "bad_path", f"path {pattern.text!r} contains the control character U+{ord(control.group()):04X}; rename the file (Lockstep does not coordinate such names)"
            )
    return patterns


def _parse_patterns(paths: list[str]) -> list[Pattern]:
    if not paths:
        raise PeerError("bad_request", "no paths given")
    if len(paths) == 1:  # the usual request: nothing to deduplicate
        return [Pattern.parse(paths[0])]
    seen: dict[str, Pattern] = {}
    for text in paths:
        pattern = Pattern.parse(text)
        seen.setdefault(pattern.text, pattern)
    return list(seen.values())
