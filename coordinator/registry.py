"""The ownership registry: agents, sessions, claims, lock-delay holds, the token counter.

Theory
------
Rule 1: the registry changes *only* by ``apply(record, now)``.  The core decides what
should happen and writes it down as ledger records; applying a record is the one way
state moves.  So the state after a restart is exactly ``apply`` over the ledger, and
the ledger can never disagree with what the coordinator believed.

Rule 2: times are the coordinator's monotonic ``now``, passed in.  Lease clocks do not
survive a restart (another process, another clock): replaying a record stamps it with
the replay's ``now``, which gives every live session a fresh full lease and every hold a
fresh full lock delay — leases are extended by downtime, never expired by it.  What
people are shown (when a claim was granted, when an agent was last heard of) is
another matter: replay passes each record's ledger time as ``at`` (on this process's
clock, so in the past), and those shown times survive restarts, gone agents included.

Rule 3: fencing tokens come from one counter that only goes up.  Grants record their
token; ``tokens.reserved`` records a durable upper mark; a restarted registry issues
above both, so tokens never go backwards even if the last non-durable commits were
lost.

Agent states: ``alive`` -> ``stale`` (silence, TTL: may still be running) or ``gone``
(process exited, said bye); the table and its theory are lifecycle.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import msgspec

from ledger import records as rec
from ledger.records import Record
from probes.rules import RepairState, Standing, normalize_finding
from protocol.paths import Pattern, PatternIndex

from . import lifecycle
from .lifecycle import ALIVE
from .mergeholds import MergeHold


@dataclass(eq=False, slots=True)
class Agent:
    name: str
    session: str
    kind: str  # "session" | "run" | "oneshot"
    worktree: str = ""
    host: str = ""
    pid: int | None = None
    pid_started: float | None = None
    ttl: float | None = None  # one-shot sessions without a watched pid
    state: str = ALIVE
    reason: str = ""
    joined: float = 0.0
    last_seen: float = 0.0  # the lease clock: restarts reset it (Rule 2)
    seen: float = 0.0  # when it was last heard of, for people: from the ledger across restarts

    @property
    def live(self) -> bool:
        return self.state == ALIVE


# identity equality: two grants of one pattern are different entries; slots: one object
# per live claim instead of two (no __dict__), for memory and the collector
@dataclass(eq=False, slots=True)
class ClaimEntry:
    pattern: Pattern
    agent: str
    session: str
    token: int
    access: str  # "exclusive" | "shared"
    since: float  # the TTL clock (Rule 2)
    expires_at: float | None = None
    granted: float = 0.0  # when it was granted, for people: from the ledger across restarts


@dataclass(eq=False, slots=True)
class Hold:
    """A stale holder's path, kept from everyone else until ``until`` (lock delay)."""

    pattern: Pattern
    former: str
    token: int
    until: float


class VerifyOutcome(msgspec.Struct, frozen=True):
    job: str
    mark: int  # the clock when the run started
    passed: bool
    failed: list[str]  # names of the failing checks
    tree: str = ""  # the content id it ran on ("" unknown)


class HandoffOutcome(msgspec.Struct, frozen=True):
    """An agent's newest handoff check (``handoff.checked``)."""

    job: str
    mark: int  # the clock when it was recorded: a later write makes it stale
    target: str  # the note checked
    score: int
    threshold: int
    passed: bool
    false_facts: list[str] = []
    missing: list[str] = []


class TaskEntry(msgspec.Struct, kw_only=True):
    """A task (``task.queued``): for ``agent`` (None: anyone), ``queued`` -> ``taken`` (by
    ``by``) -> ``done``.  ``delivered``: shown to its agent already (an inbox)."""

    id: int
    task: str
    agent: str | None = None
    because: str = ""
    queued_by: str = ""
    state: str = "queued"  # "queued" | "taken" | "done"
    by: str | None = None  # who took it
    delivered: bool = False


class MessageEntry(msgspec.Struct, kw_only=True):
    """A message to ``to`` (``message.sent``); ``delivered`` once shown to it."""

    id: int
    to: str
    text: str
    sender: str = ""
    delivered: bool = False


TASKS_KEPT = 500  # finished tasks remembered (the ledger keeps them all)
MESSAGES_KEPT = 50  # per agent: delivered messages remembered for ``inbox``

PASSED_TREES_KEPT = 32  # per agent: the contents its newest passing verify runs ran on
LANDED_HEADS_KEPT = 4096  # branch commits known to have landed (the [land] required gate asks)
REPORTED_KEPT = 64  # per agent and turn: states its stops already reported


class SnapshotAgent(msgspec.Struct, frozen=True):
    name: str
    session: str
    kind: str
    worktree: str
    host: str
    pid: int | None
    pid_started: float | None
    ttl: float | None
    state: str
    reason: str
    seen_ago: float = 0.0  # seconds before ``Snapshot.taken`` it was last heard of


class SnapshotClaim(msgspec.Struct, frozen=True):
    pattern: str
    agent: str
    session: str
    token: int
    access: str
    ttl: float | None
    granted_ago: float = 0.0  # seconds before ``Snapshot.taken`` it was granted


class SnapshotHold(msgspec.Struct, frozen=True):
    pattern: str
    former: str
    token: int
    hold_for: float


class SnapshotMergeHold(msgspec.Struct, frozen=True):
    path: str
    holder: str
    branch: str
    commits: list[str]
    target: str = "main"


class Snapshot(msgspec.Struct, frozen=True):
    """The registry at one ledger id, so a long ledger need not be replayed from 1.
    Times are stored as durations and restored against the restart's ``now``."""

    format: int
    epoch: int
    next_token: int
    reserved_until: int
    session_counter: int
    agents: list[SnapshotAgent]
    claims: list[SnapshotClaim]
    holds: list[SnapshotHold]
    clock: int = 0
    last_write: dict[str, int] = {}
    last_verify: dict[str, VerifyOutcome] = {}
    failing_rounds: dict[str, int] = {}
    blocked: dict[str, str] = {}
    block_lifts: dict[str, list[str]] = {}  # blocked agent -> what lifts its block ("verify", "handoff")
    block_allows: dict[str, list[str]] = {}
    handoffs: dict[str, HandoffOutcome] = {}
    repair: RepairState = RepairState()
    edit_batches: list[str] = []  # agents with an edit batch not yet verified
    merge_holds: list[SnapshotMergeHold] = []
    taken: float = 0.0  # wall-clock time it was taken (0: unknown), so shown ages count downtime
    passed_trees: dict[str, dict[str, str]] = {}
    turn_trees: dict[str, str] = {}
    landed_heads: dict[str, str] = {}
    turn_reported: dict[str, dict[str, str]] = {}
    open_landings: dict[str, tuple[str, str]] = {}
    tasks: list[TaskEntry] = []
    messages: list[MessageEntry] = []
    task_counter: int = 0
    message_counter: int = 0


SNAPSHOT_FORMAT = 1



def _forget_id(index: dict[str, dict[int, None]], key: str, number: int) -> None:
    """Take ``number`` out of ``index[key]``, and the key with its last id."""
    ids = index.get(key)
    if ids is not None:
        ids.pop(number, None)
        if not ids:
            del index[key]

@dataclass
class Registry:
    epoch: int = 0
    next_token: int = 1
    reserved_until: int = 0  # tokens up to here may have been handed out
    session_counter: int = 0
    agents: dict[str, Agent] = field(default_factory=dict)  # name -> newest session
    sessions: dict[str, Agent] = field(default_factory=dict)  # session id -> agent
    claims: PatternIndex = field(default_factory=PatternIndex)
    holds: PatternIndex = field(default_factory=PatternIndex)
    # agent -> pattern text -> its entry (re-claiming a pattern supersedes: one per text)
    claims_by_agent: dict[str, dict[str, ClaimEntry]] = field(default_factory=dict)
    # Characters in live claims' pattern texts and holder names: what a status listing
    # them would take is known without walking them (core's status size estimate).
    claim_chars: int = 0
    # The verify loop's bookkeeping.  ``clock`` ticks at every allowed write intent
    # and every verify start, so "a verify run that started after the last write"
    # is a comparison of two marks.
    clock: int = 0
    job_counter: int = 0
    last_write: dict[str, int] = field(default_factory=dict)  # agent -> clock mark
    verify_marks: dict[str, tuple[str, int]] = field(default_factory=dict)  # job -> (agent, mark)
    last_verify: dict[str, VerifyOutcome] = field(default_factory=dict)  # agent -> newest finished
    failing_rounds: dict[str, int] = field(default_factory=dict)  # agent -> consecutive failed verifies
    blocked: dict[str, str] = field(default_factory=dict)  # agent -> why a rule blocked it
    # What lifts each block: a passing verify run ("verify") or, for a block a handoff
    # finding raised, only a passing handoff check ("handoff"); all of them, to lift it.
    block_lifts: dict[str, list[str]] = field(default_factory=dict)
    block_allows: dict[str, list[str]] = field(default_factory=dict)  # paths a blocked agent may still write
    handoffs: dict[str, HandoffOutcome] = field(default_factory=dict)  # agent -> its newest handoff check
    repair: RepairState = field(default_factory=RepairState)  # retries answered per (agent, finding)
    # agent -> time of the last allowed write of its edit batch, until a verify run (or
    # its refusal) takes the batch; acted on by Core.tick with after-each-edit-batch
    edit_batches: dict[str, float] = field(default_factory=dict)
    # agent -> content id -> the verify run that passed on it (newest last, bounded):
    # verify on content that already passed answers from here; so do done and Stop.
    passed_trees: dict[str, dict[str, str]] = field(default_factory=dict)
    turn_trees: dict[str, str] = field(default_factory=dict)  # agent -> content its turn started from
    # The turn-end gate under [land] required (landgate.py): branch commits that landed
    # (head -> the integration commit, newest last, bounded), and per agent what this
    # turn's stops already reported to it (key -> reason): a stop blocked on
    # uncommitted content ("tree ID"), a refused landing ("refused HEAD").  Reported
    # once, a state lets the turn end: the gate never traps the model.
    landed_heads: dict[str, str] = field(default_factory=dict)
    turn_reported: dict[str, dict[str, str]] = field(default_factory=dict)
    open_landings: dict[str, tuple[str, str]] = field(default_factory=dict)  # job -> (agent, head), not decided
    expiring: dict[int, ClaimEntry] = field(default_factory=dict)  # entries with a TTL, by id()
    exclusive_count: Counter = field(default_factory=Counter)  # agent -> exclusive entries
    # Released paths whose commits have not reached the integration branch (mergeholds.py).
    merge_holds: PatternIndex = field(default_factory=PatternIndex)
    merge_holds_by_path: dict[str, MergeHold] = field(default_factory=dict)
    # Tasks and messages for agents (coordinator/inbox.py), by id.
    tasks: dict[int, TaskEntry] = field(default_factory=dict)
    messages: dict[int, MessageEntry] = field(default_factory=dict)
    task_counter: int = 0
    message_counter: int = 0
    # What each agent has not been shown yet, by id (ordered sets): every write intent
    # asks how much waits, which must not cost a walk over every message and task.
    unread: dict[str, dict[int, None]] = field(default_factory=dict)  # recipient -> undelivered messages
    queued_for: dict[str, dict[int, None]] = field(default_factory=dict)  # agent -> queued tasks not shown

    # ------------------------------------------------------------------ queries

    def live_agent(self, name: str) -> Agent | None:
        agent = self.agents.get(name)
        return agent if agent is not None and agent.live else None

    def entries_of(self, name: str) -> list[ClaimEntry]:
        return list(self.claims_by_agent.get(name, {}).values())

    def all_entries(self) -> Iterator[ClaimEntry]:
        for entries in self.claims_by_agent.values():
            yield from entries.values()

    def entry_named(self, agent: str, text: str) -> ClaimEntry | None:
        """``agent``'s live claim on exactly this pattern text, if any."""
        return self.claims_by_agent.get(agent, {}).get(text)

    def all_holds(self) -> list[Hold]:
        return [hold for _, hold in self.holds]

    def exclusive_holders(self) -> list[str]:
        return [name for name, count in self.exclusive_count.items() if count > 0]

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, now: float, lock_delay: float, wall: float = 0.0) -> Snapshot:
        """``wall``: the wall-clock time of ``now`` (kept so shown ages survive a restart)."""
        return Snapshot(
            format=SNAPSHOT_FORMAT,
            epoch=self.epoch,
            next_token=self.next_token,
            reserved_until=self.reserved_until,
            session_counter=self.session_counter,
            agents=[
                SnapshotAgent(
                    a.name, a.session, a.kind, a.worktree, a.host, a.pid, a.pid_started, a.ttl, a.state, a.reason,
                    max(0.0, now - a.seen),
                )
                for a in self.sessions.values()
            ],
            claims=[
                SnapshotClaim(
                    e.pattern.text, e.agent, e.session, e.token, e.access,
                    None if e.expires_at is None else e.expires_at - e.since,  # the full TTL, as replay gives
                    max(0.0, now - e.granted),
                )
                for e in self.all_entries()
            ],
            holds=[SnapshotHold(h.pattern.text, h.former, h.token, lock_delay) for h in self.all_holds() if h.until > now],
            clock=self.clock,
            last_write=dict(self.last_write),
            last_verify=dict(self.last_verify),
            failing_rounds=dict(self.failing_rounds),
            blocked=dict(self.blocked),
            block_lifts={agent: list(lifts) for agent, lifts in self.block_lifts.items()},
            block_allows={agent: list(paths) for agent, paths in self.block_allows.items()},
            handoffs=dict(self.handoffs),
            repair=self.repair,
            edit_batches=list(self.edit_batches),
            passed_trees={agent: dict(trees) for agent, trees in self.passed_trees.items()},
            turn_trees=dict(self.turn_trees),
            landed_heads=dict(self.landed_heads),
            turn_reported={agent: dict(keys) for agent, keys in self.turn_reported.items()},
            open_landings=dict(self.open_landings),
            tasks=[msgspec.structs.replace(t) for t in self.tasks.values()],
            messages=[msgspec.structs.replace(x) for x in self.messages.values()],
            task_counter=self.task_counter,
            message_counter=self.message_counter,
            merge_holds=[
                SnapshotMergeHold(h.path.text, h.holder, h.branch, list(h.commits), h.target)
                for h in self.merge_holds_by_path.values()
            ],
            taken=wall,
        )

    @classmethod
    def from_snapshot(cls, snap: Snapshot, now: float, wall: float = 0.0) -> "Registry":
        """Rebuild; like replay, every live session and hold starts afresh at ``now``.
        ``wall``: the wall-clock time of ``now``; shown times then are the snapshot's,
        downtime counted (without it they are ``now``, as a replay without times)."""
        timed = bool(wall and snap.taken)
        downtime = max(0.0, wall - snap.taken) if timed else 0.0
        reg = cls(
            epoch=snap.epoch,
            next_token=snap.next_token,
            reserved_until=snap.reserved_until,
            session_counter=snap.session_counter,
            clock=snap.clock,
            last_write=dict(snap.last_write),
            last_verify=dict(snap.last_verify),
            failing_rounds=dict(snap.failing_rounds),
            blocked=dict(snap.blocked),
            block_lifts={agent: list(lifts) for agent, lifts in snap.block_lifts.items()},
            block_allows={agent: list(paths) for agent, paths in snap.block_allows.items()},
            handoffs=dict(snap.handoffs),
            repair=snap.repair,
            edit_batches=dict.fromkeys(snap.edit_batches, now),
            passed_trees={agent: dict(trees) for agent, trees in snap.passed_trees.items()},
            turn_trees=dict(snap.turn_trees),
            landed_heads=dict(snap.landed_heads),
            turn_reported={agent: dict(keys) for agent, keys in snap.turn_reported.items()},
            open_landings={job: tuple(landing) for job, landing in snap.open_landings.items()},
            tasks={t.id: msgspec.structs.replace(t) for t in snap.tasks},
            messages={x.id: msgspec.structs.replace(x) for x in snap.messages},
            task_counter=snap.task_counter,
            message_counter=snap.message_counter,
        )
        for message in reg.messages.values():
            if not message.delivered:
                reg.unread.setdefault(message.to, {})[message.id] = None
        for task in reg.tasks.values():
            if task.agent is not None and task.state == "queued" and not task.delivered:
                reg.queued_for.setdefault(task.agent, {})[task.id] = None
        for a in snap.agents:
            seen = now - a.seen_ago - downtime if timed else now
            agent = Agent(a.name, a.session, a.kind, a.worktree, a.host, a.pid, a.pid_started, a.ttl, a.state, a.reason, seen, now, seen)
            reg.sessions[a.session] = agent
            current = reg.agents.get(a.name)
            if current is None or not current.live or agent.live:
                reg.agents[a.name] = agent
        for c in snap.claims:
            reg.apply(
                rec.ClaimGranted(agent=c.agent, session=c.session, token=c.token,
                                 patterns=[c.pattern], access=c.access, ttl=c.ttl),
                now,
                now - c.granted_ago - downtime if timed else now,
            )
        for h in snap.holds:
            pattern = Pattern.parse(h.pattern)
            reg.holds.add(pattern, Hold(pattern, h.former, h.token, now + h.hold_for))
        for mh in snap.merge_holds:
            reg._add_merge_hold(MergeHold(Pattern.parse(mh.path), mh.holder, mh.branch, tuple(mh.commits), mh.target))
        return reg

    # ------------------------------------------------------------------ the one mutator

    def apply(self, record: Record, now: float, at: float | None = None) -> None:
        """Apply one ledger record (kinds not matched here are written for people and
        subscribers, and change nothing).  Ordered by how often each kind comes.

        ``at``: when the record was written, on this process's clock (replay passes the
        ledger's time; live records are written ``now``).  Only shown times use it."""
        if at is None:
            at = now
        kind = type(record)
        # Grants and releases are most of what is applied: taken by their exact types
        # before the match's chain of isinstance tests.  No record type derives from
        # either, so the match would take the same case; the tail is the same too.
        if kind is rec.ClaimGranted:
            self._granted(record, now, at)
            if record.token >= self.next_token:
                self.next_token = record.token + 1
            self._seen(record.session, at)
            return
        if kind is rec.ClaimReleased:
            self._released(record, now)
            self._seen(record.session, at)
            return
        match record:
            case rec.IntentDecided():
                self._intent_decided(record, now)
            case rec.ClaimGranted():
                self._granted(record, now, at)
                self.next_token = max(self.next_token, record.token + 1)
            case rec.ClaimReleased() | rec.ClaimExpired():
                self._released(record, now)
            case rec.AgentJoined():
                self._joined(record, now, at)
            case rec.AgentStale() | rec.AgentLeft():
                self._ended(record)
            case rec.AgentWatched():
                self._watched(record)
            case rec.AgentAdopted():
                self._adopted(record)
            case rec.AgentForgotten():
                self._forgotten(record)
            case rec.TokensReserved():
                self.reserved_until = max(self.reserved_until, record.upto)
            case rec.JobStarted():
                self._job_started(record)
            case rec.VerifyFinished():
                self._verify_finished(record)
            case rec.TurnStarted():
                self.failing_rounds.pop(record.agent, None)
                self.turn_reported.pop(record.agent, None)
                if isinstance(record.tree, str) and record.tree:
                    self.turn_trees[record.agent] = record.tree
            case rec.RuleDecided():
                if record.action == "retry":
                    self.repair = self.repair.with_retry(record.agent, record.finding, now)
                elif record.rule:
                    phrase = normalize_finding(record.finding)
                    standing = [Standing(record.rule, record.action, agent, phrase, probe, now) for agent, probe in record.members]
                    self.repair = self.repair.with_standing(standing)
            case rec.RuleResolved():
                for probe in record.probes:
                    self.repair = self.repair.resolved(record.agent, probe)
            case rec.VerifyRefused():
                self.edit_batches.pop(record.agent, None)
            case rec.AgentBlocked():
                self._blocked(record)
            case rec.HandoffChecked():
                self.handoffs[record.agent] = HandoffOutcome(
                    record.job, self.clock, record.target, record.score, record.threshold, record.passed,
                    list(record.false_facts), list(record.missing),
                )
                if record.passed:
                    self._lift(record.agent, "handoff")
            case rec.CoordinatorPaused():
                self._paused(record, now)
            case rec.CoordinatorStarted():
                self._started(record)
            case rec.LandQueued():
                if record.agent:
                    self.open_landings[record.job] = (record.agent, record.head)
            case rec.LandLanded():
                self.open_landings.pop(record.job, None)
                if record.head:
                    self.landed_heads.pop(record.head, None)
                    self.landed_heads[record.head] = record.commit
                    while len(self.landed_heads) > LANDED_HEADS_KEPT:
                        del self.landed_heads[next(iter(self.landed_heads))]
            case rec.LandRefused():
                self.open_landings.pop(record.job, None)
                if record.agent and record.head:
                    self.report(record.agent, f"refused {record.head}", f"{record.verdict}: {record.reason}")
            case rec.StopDecided():
                if record.verdict == "block" and record.tree:
                    self.report(record.agent, f"tree {record.tree}", record.reason)
            case rec.TaskQueued() | rec.TaskTaken() | rec.TaskDone() | rec.MessageSent() | rec.InboxDelivered():
                self._inbox(record)
            case rec.MergeHeld():
                for path, commits in record.paths.items():
                    self._add_merge_hold(MergeHold(Pattern.parse(path), record.agent, record.branch, tuple(commits), record.target))
            case rec.MergeFreed():
                for path in record.paths:
                    hold = self.merge_holds_by_path.pop(path, None)
                    if hold is not None:
                        self.merge_holds.remove(hold.path, hold)
        if not isinstance(record, rec.AgentStale):
            self._seen(record.session, at)

    def _seen(self, session: str | None, at: float) -> None:
        """A record of ``session`` at ``at``: it did this, so it was heard of."""
        if session is not None:
            agent = self.sessions.get(session)
            if agent is not None and agent.seen < at:
                agent.seen = at

    # ------------------------------------------------------------------ handlers

    def _started(self, record: rec.CoordinatorStarted) -> None:
        self.epoch = record.epoch
        self.session_counter = 0
        self.job_counter = 0
        self.verify_marks.clear()  # runs cut short by a restart never finish
        self.next_token = max(self.next_token, self.reserved_until + 1)

    def _joined(self, record: rec.AgentJoined, now: float, at: float) -> None:
        agent = Agent(
            name=record.agent,
            session=record.session,
            kind=record.kind,
            worktree=record.worktree,
            host=record.host,
            pid=record.pid,
            pid_started=record.pid_started,
            ttl=record.ttl,
            joined=at,
            last_seen=now,
            seen=at,
        )
        self.agents[agent.name] = agent
        self.sessions[agent.session] = agent

    def _watched(self, record: rec.AgentWatched) -> None:
        agent = self.sessions.get(record.session)
        if agent is not None:
            agent.pid = record.pid
            agent.pid_started = record.pid_started
            agent.ttl = None  # a watched pid, not a TTL, bounds this session now

    def _adopted(self, record: rec.AgentAdopted) -> None:
        agent = self.sessions.get(record.session)
        if agent is not None:
            agent.kind = record.kind
            agent.pid = record.pid
            agent.pid_started = record.pid_started
            agent.ttl = None  # heartbeats (and a watched pid, if any) bound it now

    def _ended(self, record: rec.AgentStale | rec.AgentLeft) -> None:
        agent = self.sessions.get(record.session)
        step = None if agent is None else lifecycle.TRANSITIONS.get((agent.state, lifecycle.EVENT_OF[type(record)]))
        if step is not None:  # lifecycle Rule 3: a refused record changes nothing
            agent.state = step.to
            agent.reason = record.reason

    def _forgotten(self, record: rec.AgentForgotten) -> None:
        for session in record.sessions:
            agent = self.sessions.pop(session, None)
            if agent is not None and self.agents.get(agent.name) is agent:
                del self.agents[agent.name]

    def _granted(self, record: rec.ClaimGranted, now: float, at: float) -> None:
        agent, session, token, access, ttl = record.agent, record.session, record.token, record.access, record.ttl
        expires_at = None if ttl is None else now + ttl
        by_agent = self.claims_by_agent
        for text in record.patterns:
            pattern = Pattern.parse(text)
            text = pattern.text  # canonical
            mine = by_agent.get(agent)
            old = None if mine is None else mine.get(text)
            if old is not None:
                self._remove_entry(old)  # superseded: the new token is the live grant
                mine = by_agent.get(agent)  # (gone if that was its only claim)
            entry = ClaimEntry(pattern, agent, session, token, access, now, expires_at, at)
            self.claims.add(pattern, entry)
            if mine is None:
                mine = by_agent[agent] = {}
            mine[text] = entry
            self.claim_chars += len(text) + len(agent)
            if expires_at is not None:
                self.expiring[id(entry)] = entry
            if access == "exclusive":
                counts = self.exclusive_count
                counts[agent] = counts.get(agent, 0) + 1

    def _released(self, record: rec.ClaimReleased | rec.ClaimExpired, now: float) -> None:
        hold_for = record.hold_for
        mine = self.claims_by_agent.get(record.agent)
        for text in record.patterns:
            entry = None if mine is None else mine.get(text)
            if entry is not None and entry.token == record.token:
                self._remove_entry(entry)
                if hold_for > 0:
                    hold = Hold(entry.pattern, record.agent, entry.token, now + hold_for)
                    self.holds.add(entry.pattern, hold)

    def _add_merge_hold(self, hold: MergeHold) -> None:
        old = self.merge_holds_by_path.pop(hold.path.text, None)
        if old is not None:
            self.merge_holds.remove(old.path, old)
        self.merge_holds.add(hold.path, hold)
        self.merge_holds_by_path[hold.path.text] = hold

    def _remove_entry(self, entry: ClaimEntry) -> None:
        pattern, agent = entry.pattern, entry.agent
        self.claims.remove(pattern, entry)
        mine = self.claims_by_agent[agent]
        del mine[pattern.text]
        self.claim_chars -= len(pattern.text) + len(agent)
        if entry.expires_at is not None:  # only entries with a TTL are in ``expiring``
            self.expiring.pop(id(entry), None)
        if not mine:
            del self.claims_by_agent[agent]
        if entry.access == "exclusive":
            counts = self.exclusive_count
            left = counts.get(agent, 0) - 1
            if left > 0:
                counts[agent] = left
            else:
                counts.pop(agent, None)

    def _job_started(self, record: rec.JobStarted) -> None:
        self.job_counter += 1
        if record.kind == "verify" and record.agent is not None:
            self.edit_batches.pop(record.agent, None)  # this run verifies the batch
            self.clock += 1
            self.verify_marks[record.job] = (record.agent, self.clock)

    def _verify_finished(self, record: rec.VerifyFinished) -> None:
        started = self.verify_marks.pop(record.job, None)
        if started is None:
            return
        agent, mark = started
        passed = record.passed
        self.last_verify[agent] = VerifyOutcome(record.job, mark, passed, list(record.failed), record.tree)
        if passed and record.tree:
            trees = self.passed_trees.setdefault(agent, {})
            trees.pop(record.tree, None)
            trees[record.tree] = record.reused if isinstance(record.reused, str) else record.job
            while len(trees) > PASSED_TREES_KEPT:
                del trees[next(iter(trees))]
        if passed:
            self.failing_rounds.pop(agent, None)
            self._lift(agent, "verify")
        else:
            self.failing_rounds[agent] = self.failing_rounds.get(agent, 0) + 1

    def _blocked(self, record: rec.AgentBlocked) -> None:
        self.blocked[record.agent] = record.reason
        lifts = self.block_lifts.setdefault(record.agent, [])
        if record.lifted_by not in lifts:
            lifts.append(record.lifted_by)
        if record.allow:
            allowed = self.block_allows.setdefault(record.agent, [])
            allowed.extend(p for p in record.allow if p not in allowed)

    def _lift(self, agent: str, by: str) -> None:
        """A passing verify run (``by = "verify"``) or handoff check (``"handoff"``)
        lifts the blocks it lifts; the agent is free once none stands."""
        if agent not in self.blocked:
            return
        lifts = self.block_lifts.get(agent) or ["verify"]  # a block recorded before lifted_by existed
        if by in lifts:
            lifts = [x for x in lifts if x != by]
        if lifts:
            self.block_lifts[agent] = lifts
            return
        self.blocked.pop(agent, None)
        self.block_lifts.pop(agent, None)
        self.block_allows.pop(agent, None)

    def may_write_while_blocked(self, agent: str, paths: list[str]) -> bool:
        """A blocked agent may still write what its block allows (a handoff block: the
        note it must fix), and only that."""
        allowed = self.block_allows.get(agent, [])
        return bool(paths) and all(p in allowed for p in paths) and self.block_lifts.get(agent) == ["handoff"]

    def _inbox(self, record: Record) -> None:
        """Tasks and messages: their state is exactly these records (coordinator/inbox.py)."""
        match record:
            case rec.TaskQueued():
                number = record.id or self.task_counter + 1
                self.task_counter = max(self.task_counter, number)
                self.tasks[number] = TaskEntry(
                    id=number, task=record.task or "", agent=record.agent, because=record.because, queued_by=record.by
                )
                if record.agent is not None:
                    self.queued_for.setdefault(record.agent, {})[number] = None
            case rec.TaskTaken():
                task = self.tasks.get(record.id)
                if task is not None and task.state == "queued":
                    task.state, task.by = "taken", record.agent
                    self._shown_task(task)
            case rec.TaskDone():
                task = self.tasks.get(record.id)
                if task is not None and task.state != "done":
                    task.state, task.by = "done", task.by or record.agent
                    self._shown_task(task)
                    finished = [t.id for t in self.tasks.values() if t.state == "done"]
                    for old in finished[: max(0, len(finished) - TASKS_KEPT)]:
                        del self.tasks[old]
            case rec.MessageSent():
                self.message_counter = max(self.message_counter, record.id)
                self.messages[record.id] = MessageEntry(id=record.id, to=record.agent or "", text=record.text, sender=record.sender)
                self.unread.setdefault(record.agent or "", {})[record.id] = None
            case rec.InboxDelivered():
                for number in record.messages:
                    if (message := self.messages.get(number)) is not None:
                        message.delivered = True
                        _forget_id(self.unread, message.to, number)
                for number in record.tasks:
                    if (task := self.tasks.get(number)) is not None:
                        task.delivered = True
                        self._shown_task(task)
                seen = [x.id for x in self.messages.values() if x.to == record.agent and x.delivered]
                for old in seen[: max(0, len(seen) - MESSAGES_KEPT)]:
                    del self.messages[old]

    def _shown_task(self, task: TaskEntry) -> None:
        if task.agent is not None:
            _forget_id(self.queued_for, task.agent, task.id)

    def undelivered(self, name: str) -> tuple[list[MessageEntry], list[TaskEntry]]:
        """What ``name`` has not been shown yet: messages to it, and queued tasks for it."""
        messages = [self.messages[number] for number in self.unread.get(name, ())]
        tasks = [self.tasks[number] for number in self.queued_for.get(name, ())]
        return messages, tasks

    def waiting(self, name: str) -> int:
        """How many messages and tasks wait to be shown to ``name`` (per write intent: O(1))."""
        return len(self.unread.get(name, ())) + len(self.queued_for.get(name, ()))

    def running_verify(self, agent: str) -> str | None:
        """The job id of a verify run of ``agent`` that has not finished, if any."""
        return next((job for job, (name, _) in self.verify_marks.items() if name == agent), None)

    def report(self, agent: str, key: str, reason: str) -> None:
        keys = self.turn_reported.setdefault(agent, {})
        keys[key] = reason
        while len(keys) > REPORTED_KEPT:
            del keys[next(iter(keys))]

    def open_landing(self, agent: str, head: str) -> str | None:
        """The job of ``agent``'s landing of ``head`` not yet decided, if any."""
        return next((job for job, landing in self.open_landings.items() if landing == (agent, head)), None)

    def reported(self, agent: str, key: str) -> str | None:
        """What this turn's stops already told ``agent`` about ``key``, if anything."""
        return self.turn_reported.get(agent, {}).get(key)

    def passed_on(self, agent: str, tree: str) -> str | None:
        """The verify run of ``agent`` that passed on content ``tree``, if any."""
        return self.passed_trees.get(agent, {}).get(tree) if tree else None

    def _intent_decided(self, record: rec.IntentDecided, now: float) -> None:
        if record.verdict in ("allow", "warn"):
            self.clock += 1
            self.last_write[record.agent] = self.clock
            self.edit_batches[record.agent] = now

    def _paused(self, record: rec.CoordinatorPaused, now: float) -> None:
        """The coordinator's loop stood still: nobody's lease ran while it did."""
        gap = record.gap
        for agent in self.agents.values():
            if agent.live:
                agent.last_seen = max(agent.last_seen, now)
        for entry in self.expiring.values():
            entry.expires_at += gap
        for hold in self.all_holds():
            hold.until += gap

    # -------------------------------------------------------------- non-ledger upkeep

    def touch(self, agent: Agent, now: float) -> None:
        """Any message from a live agent renews its lease (not a ledger event)."""
        agent.last_seen = now
        agent.seen = now

    def drop_expired_holds(self, now: float) -> None:
        for hold in self.all_holds():
            if hold.until <= now:
                self.holds.remove(hold.pattern, hold)

    def snapshot_counts(self) -> dict[str, Any]:
        return {
            "agents_alive": sum(1 for a in self.agents.values() if a.live),
            "agents_known": len(self.agents),
            "claims": len(self.claims),
            "holds": len(self.holds),
            "merge_holds": len(self.merge_holds_by_path),
            "next_token": self.next_token,
        }


# The kinds that change state (those ``apply`` matches): replay reads only these.
# Others (claim.refused, probe results, rule responses, coordinator.stopped...) are
# written for people and subscribers.
STATE_KINDS = frozenset(
    cls.KIND
    for cls in (
        rec.CoordinatorStarted, rec.TokensReserved, rec.AgentJoined, rec.AgentWatched, rec.AgentAdopted,
        rec.AgentStale, rec.AgentLeft, rec.AgentForgotten, rec.AgentBlocked, rec.HandoffChecked,
        rec.ClaimGranted, rec.ClaimReleased, rec.ClaimExpired, rec.IntentDecided,
        rec.CoordinatorPaused, rec.JobStarted, rec.VerifyFinished, rec.TurnStarted,
        rec.RuleDecided, rec.RuleResolved, rec.VerifyRefused, rec.MergeHeld, rec.MergeFreed,
        rec.LandQueued, rec.LandLanded, rec.LandRefused, rec.StopDecided,
        rec.TaskQueued, rec.TaskTaken, rec.TaskDone, rec.MessageSent, rec.InboxDelivered,
    )
)  # fmt: skip
