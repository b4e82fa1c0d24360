"""The catalogue of ledger records: every kind the coordinator writes, one Struct each.

Theory
------
A row of ``events`` is ``(id, ts, epoch, kind, agent, session, token, data)``.  The
ledger adds ``id``, ``ts`` and ``epoch``; a record is the rest.  Each kind is one
frozen Struct below: its class variable ``KIND`` is the ``kind`` column (the tag of
this union), the header fields ``agent``, ``session`` and ``token`` are the columns
of the same names, and every other field is a key of the ``data`` JSON object.

Rules:

1. This module is the only list of kinds.  ``BY_KIND`` maps each kind to its Struct;
   the README and ``docs/ledger.md`` list exactly these (a test checks it).
2. The layout of a kind never changes incompatibly: kinds and data keys are never
   renamed, a new key gets a default, so every ledger ever written still reads.
   Users query the table with ``sqlite3``; the catalogue types what is there.
3. A key that only some records of a kind carry (``notice`` of ``agent.joined``,
   ``forced`` of ``claim.released``...) defaults to ``UNSET`` and is left out of
   ``data`` when unset, exactly as it was before there were types.
4. ``kind`` is a class variable, not msgspec's ``tag_field``: the data of several kinds
   has its own ``kind`` key (a job's kind, a probe's kind), which a tag would shadow.
5. A kind whose data repeats a column (``intent.decided`` repeats ``token``,
   ``rule.response`` repeats ``agent``) names it in ``ALSO_IN_DATA``.
6. Concrete kinds never subclass each other (``match`` on a class must not catch
   another kind); kinds that share fields share a private base.
7. ``DURABLE`` kinds are committed with a full fsync (the token reservation, a new
   epoch).

Encoding is one dict built from the Struct's fields and one ``msgspec.json`` encode:
about as cheap as the dicts the producers used to build by hand.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from protocol.messages import Conflict, ProbeRequest, StaleBase

HEADER = ("agent", "session", "token")


class Record(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A ledger record: what the coordinator appends.  The registry changes only by
    applying these (coordinator/registry.py).  Never tracked by the cyclic collector
    (``gc=False``, as for wire messages: plain data, no cycle through a record)."""

    KIND: ClassVar[str] = ""
    DURABLE: ClassVar[bool] = False
    ALSO_IN_DATA: ClassVar[tuple[str, ...]] = ()

    agent: str | None = None
    session: str | None = None
    token: int | None = None


# ---------------------------------------------------------------- the coordinator


class CoordinatorStarted(Record, frozen=True, kw_only=True):
    """A new epoch began: the registry was rebuilt from the ledger."""

    KIND: ClassVar[str] = "coordinator.started"
    DURABLE: ClassVar[bool] = True

    epoch: int
    mode: str = ""
    pid: int = 0
    endpoints: list[str] = []
    live_agents: int = 0
    claims: int = 0


class CoordinatorStopped(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "coordinator.stopped"

    reason: str = ""


class LedgerCompacted(Record, frozen=True, kw_only=True):
    """Old events a registry snapshot covers were removed (``lockstep ledger compact``)."""

    KIND: ClassVar[str] = "ledger.compacted"

    removed: int
    upto: int  # the snapshot that covers them
    before: float  # removed events were older than this wall-clock time
    by: str = ""


class CoordinatorPaused(Record, frozen=True, kw_only=True):
    """The event loop stood still for ``gap`` seconds: every lease is extended by it."""

    KIND: ClassVar[str] = "coordinator.paused"

    gap: float


class TokensReserved(Record, frozen=True, kw_only=True):
    """Tokens up to ``upto`` may be handed out; a restart issues above it."""

    KIND: ClassVar[str] = "tokens.reserved"
    DURABLE: ClassVar[bool] = True

    upto: int


# ---------------------------------------------------------------- agents


class AgentJoined(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "agent.joined"

    kind: str = "session"  # "session" | "run" | "oneshot"
    worktree: str = ""
    host: str = ""
    pid: int | None = None
    pid_started: float | None = None
    ttl: float | None = None
    notice: str | UnsetType = UNSET  # why a resumed session got a new one


class AgentWatched(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "agent.watched"

    pid: int
    pid_started: float | None = None


class AgentAdopted(Record, frozen=True, kw_only=True):
    """A long-lived client came back after its session ended and took over the live
    one-shot session a CLI call had opened for its name meanwhile (its claims stay)."""

    KIND: ClassVar[str] = "agent.adopted"

    kind: str = "session"  # the returning client's kind: "session" | "run"
    pid: int | None = None
    pid_started: float | None = None
    previous: str = ""  # the ended session the client came back with


class _SessionEnded(Record, frozen=True, kw_only=True):
    reason: str = ""


class AgentStale(_SessionEnded, frozen=True, kw_only=True):
    """Silence or a TTL ended the session; the holder may still run (its paths are held)."""

    KIND: ClassVar[str] = "agent.stale"


class AgentLeft(_SessionEnded, frozen=True, kw_only=True):
    """The agent said bye or its process exited: its paths are free at once."""

    KIND: ClassVar[str] = "agent.left"


class AgentForgotten(Record, frozen=True, kw_only=True):
    """Ended sessions dropped from the registry (``max_dead_agents``)."""

    KIND: ClassVar[str] = "agent.forgotten"

    sessions: list[str]


class AgentBlocked(Record, frozen=True, kw_only=True):
    """A rule blocked the agent until its next passing verify run, or (``lifted_by =
    "handoff"``: a handoff finding) until its next passing handoff check."""

    KIND: ClassVar[str] = "agent.blocked"

    reason: str = "blocked by a rule"
    lifted_by: str = "verify"  # "verify" | "handoff": what lifts the block
    allow: list[str] = []  # paths the agent may still write while blocked (its handoff note)


# ---------------------------------------------------------------- claims and intents


class ClaimGranted(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "claim.granted"

    patterns: list[str]
    access: str = "exclusive"  # "exclusive" | "shared"
    ttl: float | None = None
    auto: bool = False  # claimed by an allowed write intent


class ClaimRefused(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "claim.refused"

    patterns: list[str]
    reason: str
    conflicts: list[Conflict] = []
    stale: list[StaleBase] | UnsetType = UNSET  # refused for a stale base (fresh_base)


class _Release(Record, frozen=True, kw_only=True):
    patterns: list[str]
    reason: str = ""
    hold_for: float = 0.0  # seconds nobody else may have the paths (lock delay)


class ClaimReleased(_Release, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "claim.released"

    forced: bool | UnsetType = UNSET  # an operator's forced release
    by: str | UnsetType = UNSET
    revoked: bool | UnsetType = UNSET  # a restart in a stricter mode took it back


class ClaimExpired(_Release, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "claim.expired"


class ReleaseUncommitted(Record, frozen=True, kw_only=True):
    """Paths were released (by their holder, or when its session ended) with changes
    not committed in the holder's worktree: work nobody else sees from the integration
    branch."""

    KIND: ClassVar[str] = "release.uncommitted"

    paths: list[str]  # the uncommitted paths under the released patterns
    patterns: list[str]  # the released patterns
    worktree: str = ""
    when: str = "release"  # "release" (by the holder) | "session end"


class IntentDecided(Record, frozen=True, kw_only=True):
    """The gate decision on a write intent (``token``: the grant it writes under)."""

    KIND: ClassVar[str] = "intent.decided"
    ALSO_IN_DATA: ClassVar[tuple[str, ...]] = ("token",)

    verdict: str  # "allow" | "warn" | "block"
    reason: str
    paths: list[str] = []
    holders: list[str] = []
    conflicts: list[Conflict] = []
    stale: list[StaleBase] = []  # paths the integration branch changed since the agent's base
    maybe: int = 0  # files the call may rewrite (a formatter's), checked against holders, not claimed


class WriteUnannounced(Record, frozen=True, kw_only=True):
    """A write seen after the fact (``wrote``) to paths another agent holds."""

    KIND: ClassVar[str] = "write.unannounced"

    paths: list[str]  # the written paths others hold
    holders: list[str]
    source: str = ""  # what saw the write
    conflicts: list[Conflict] = []


class MergeHeld(Record, frozen=True, kw_only=True):
    """Released paths whose commits on the holder's ``branch`` have not reached the
    integration branch (``target``) stay refused to others until they do."""

    KIND: ClassVar[str] = "merge.held"

    paths: dict[str, list[str]]  # path -> the commits the hold waits for
    branch: str
    target: str = "main"


class MergeFreed(Record, frozen=True, kw_only=True):
    """Merge holds ended: their commits reached the integration branch, or an operator
    abandoned them (``forced``, ``by``)."""

    KIND: ClassVar[str] = "merge.freed"

    paths: list[str]
    branch: str
    reason: str
    forced: bool | UnsetType = UNSET
    by: str | UnsetType = UNSET


# ---------------------------------------------------------------- landings (the merge queue)


class _Land(Record, frozen=True, kw_only=True):
    job: str
    branch: str  # refs/heads/NAME being landed
    target: str = "main"  # the integration branch's short name


class LandQueued(_Land, frozen=True, kw_only=True):
    """A branch joined the merge queue at commit ``head`` (a restart resumes it)."""

    KIND: ClassVar[str] = "land.queued"

    head: str
    cwd: str = ""


class LandPreflight(_Land, frozen=True, kw_only=True):
    """Its turn came: merged in memory (``git merge-tree``) onto ``base``."""

    KIND: ClassVar[str] = "land.preflight"

    base: str
    attempt: int = 1


class LandVerifying(_Land, frozen=True, kw_only=True):
    """It merged cleanly: the checks run on the merged commit ``candidate``."""

    KIND: ClassVar[str] = "land.verifying"

    base: str
    candidate: str
    checks: list[str] = []


class LandRequeued(_Land, frozen=True, kw_only=True):
    """The integration branch moved under the landing (a lost compare-and-swap): it
    goes round again from the pre-flight, still first in the queue."""

    KIND: ClassVar[str] = "land.requeued"

    reason: str
    attempt: int = 1


class LandLanded(_Land, frozen=True, kw_only=True):
    """The integration branch moved from ``base`` to ``commit``."""

    KIND: ClassVar[str] = "land.landed"

    commit: str
    base: str
    head: str = ""  # the branch's commit that landed (the turn-end gate under [land] required asks)
    changed: list[str] = []  # files the landing changed on the integration branch
    commits: list[str] = []  # the branch's commits that reached it (newest first, bounded)
    waited: float = 0.0
    took: float = 0.0


class LandRefused(_Land, frozen=True, kw_only=True):
    """The landing was refused; the integration branch did not move."""

    KIND: ClassVar[str] = "land.refused"

    verdict: str  # "conflict" | "failed" | "stale" | "blocked"
    reason: str
    head: str = ""  # the branch's commit that was refused
    base: str = ""
    conflicts: list[dict[str, Any]] = []  # files, hunks, the integration commits met
    failed: list[str] = []  # the failing checks
    waited: float = 0.0
    took: float = 0.0


# ---------------------------------------------------------------- jobs, verify, done


class JobStarted(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "job.started"

    job: str
    kind: str  # "check" | "verify" | "plan" | "land"
    probe: ProbeRequest | UnsetType = UNSET  # a check's probe
    source: str | UnsetType = UNSET  # a plan's file
    cwd: str = ""
    plan: str | UnsetType = UNSET  # a plan's text


class _Result(Record, frozen=True, kw_only=True):
    """One probe's result within a job (the fields of ``probes.model.ProbeResult``)."""

    job: str
    name: str
    kind: str
    target: str
    verdict: str
    exit_code: int | None = None
    duration: float = 0.0
    finding: str | None = None
    reason: str = ""
    output: str = ""
    details: dict[str, Any] = {}


class ProbeResult(_Result, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "probe.result"


class VerifyResult(_Result, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "verify.result"


class DeploySeen(Record, frozen=True, kw_only=True):
    """An http probe saw ``url`` serve another bundle than the last one recorded there
    (the deploy history the ``bundle`` probe judges; the row's ``ts`` is when)."""

    KIND: ClassVar[str] = "deploy.seen"

    url: str
    hash: str
    size: int | None = None  # bytes, when the answer told it
    probe: str = ""  # the http probe that saw it
    job: str = ""
    previous: str = ""  # the hash recorded before at this url ("" for the first)


class _JobEnd(Record, frozen=True, kw_only=True):
    job: str
    kind: str
    verdict: str
    reason: str = ""
    responses: list[dict[str, Any]] = []


class JobFinished(_JobEnd, frozen=True, kw_only=True):
    """A check or plan job ended with its gate."""

    KIND: ClassVar[str] = "job.finished"


class VerifyFinished(_JobEnd, frozen=True, kw_only=True):
    """A verify run ended; the done gate and the repair-loop bound read this one."""

    KIND: ClassVar[str] = "verify.finished"

    passed: bool = False
    failed: list[str] = []  # names of the failing checks
    tree: str = ""  # the content id the run ran on ("" if unknown, or it changed during the run)
    reused: str | UnsetType = UNSET  # answered from the ledger: the earlier run that passed on this content


class VerifyRefused(Record, frozen=True, kw_only=True):
    """The repair-loop bound was reached: the verify run was not started."""

    KIND: ClassVar[str] = "verify.refused"

    reason: str


class TurnStarted(Record, frozen=True, kw_only=True):
    """The agent starts a new turn: its repair-loop count starts again."""

    KIND: ClassVar[str] = "turn.started"

    tree: str | UnsetType = UNSET  # the content id the turn starts from (a user prompt's hook)


class StopDecided(Record, frozen=True, kw_only=True):
    """The turn-end gate let a turn end without running verify, or let it end failing
    (the repair-loop bound was reached: ``reason`` carries the failure report); under
    ``[land] required`` also: blocked a stop on uncommitted changes (``tree``: reported
    once a turn), or let the turn end landed, or with its landing refused."""

    KIND: ClassVar[str] = "stop.decided"

    verdict: str  # "allow" (no run needed) | "escalate" (the turn ends failing) | "block" (uncommitted changes)
    reason: str
    tree: str = ""
    job: str = ""  # the verify run whose result stands, if any
    failed: list[str] = []  # when the turn ends failing: the checks that fail


class HandoffChecked(Record, frozen=True, kw_only=True):
    """An agent's handoff note was checked (``lockstep check handoff``): the done gate
    under ``[handoff] required`` and a handoff block read this one."""

    KIND: ClassVar[str] = "handoff.checked"

    job: str
    target: str  # the note checked (absolute path)
    score: int
    threshold: int  # the bar it was held to: the check's threshold, or [handoff] threshold if higher
    passed: bool  # the check passed and the score reached that bar
    false_facts: list[str] = []  # each claim of the note found false
    missing: list[str] = []  # every gap the rubric named (false facts included)


class DoneDecided(Record, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "done.decided"

    verdict: str  # "pass" | "block"
    reason: str


# ---------------------------------------------------------------- rules


class RuleResponse(Record, frozen=True, kw_only=True):
    """What a rule decided about findings, and what carrying it out did."""

    KIND: ClassVar[str] = "rule.response"
    ALSO_IN_DATA: ClassVar[tuple[str, ...]] = ("agent",)

    job: str
    action: str
    params: dict[str, Any] = {}
    reason: str = ""
    finding: str = ""
    probes: list[str] = []
    outcome: str = ""
    details: dict[str, Any] | UnsetType = UNSET  # exactly what it did (a rollback: tree, restored, removed, kept)


class RuleDecided(Record, frozen=True, kw_only=True):
    """A rule's decision about a job's findings, recorded when it is made (before it is
    carried out): a retry bound counts these, so a restart does not reset it."""

    KIND: ClassVar[str] = "rule.decided"

    job: str
    action: str
    params: dict[str, Any] = {}
    reason: str = ""
    finding: str = ""
    probes: list[str] = []
    rule: str = ""  # the deciding rule ("lockstep.toml: [[rule]] #2", "default rule 1 (...)")
    members: list[tuple[str | None, str]] = []  # (agent, probe) of each finding answered: standing until it passes


class RuleResolved(Record, frozen=True, kw_only=True):
    """Findings a rule had answered cleared (their probe passed): the rule answers
    them again if they come back."""

    KIND: ClassVar[str] = "rule.resolved"

    rule: str
    action: str
    finding: str
    probes: list[str] = []


class Notice(Record, frozen=True, kw_only=True):
    """A message to the agent named (or to the operator)."""

    KIND: ClassVar[str] = "notice"

    message: str
    operator: bool | UnsetType = UNSET


class PeerCutOff(Record, frozen=True, kw_only=True):
    """A client passed its budget of unread replies: they were dropped (coordinator/replies.py)."""

    KIND: ClassVar[str] = "peer.cut_off"

    peer: str  # the connection's routing id, hex
    replies: int  # replies dropped
    bytes: int  # their size
    budget: int


# ---------------------------------------------------------------- tasks and messages (coordinator/inbox.py)


class TaskQueued(Record, frozen=True, kw_only=True):
    """A task for ``agent`` (None: anyone), queued by a rule or a person."""

    KIND: ClassVar[str] = "task.queued"

    task: str | None = None
    because: str = ""
    id: int = 0  # 0 in ledgers written before tasks had ids: replay numbers them in order
    by: str = ""  # who queued it: a rule's finding says ``because``; a person's name here


class TaskTaken(Record, frozen=True, kw_only=True):
    """``agent`` took task ``id``: it is theirs to do."""

    KIND: ClassVar[str] = "task.taken"

    id: int


class TaskDone(Record, frozen=True, kw_only=True):
    """``agent`` finished task ``id``."""

    KIND: ClassVar[str] = "task.done"

    id: int
    note: str = ""


class MessageSent(Record, frozen=True, kw_only=True):
    """A short message to ``agent`` from ``sender`` ("" : the operator)."""

    KIND: ClassVar[str] = "message.sent"

    id: int
    text: str
    sender: str = ""


class InboxDelivered(Record, frozen=True, kw_only=True):
    """Messages and tasks were shown to ``agent`` (a hook's context, ``inbox``): not again."""

    KIND: ClassVar[str] = "inbox.delivered"

    messages: list[int] = []
    tasks: list[int] = []
    via: str = ""  # what showed them: a hook event (UserPromptSubmit, PreToolUse), inbox, mcp


# ---------------------------------------------------------------- plans (probes/plan.py)


class _PlanTransition(Record, frozen=True, kw_only=True):
    """One transition of a plan (the fields of ``probes.plan.TransitionRecord``)."""

    job: str
    kind: str  # the same as KIND: it was always part of the data
    plan: str
    step: str
    event: str
    from_state: str
    to_state: str
    attempt: int
    detail: str = ""
    rollback_of: str | None = None


class PlanStepStarted(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.started"


class PlanStepRunning(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.running"


class PlanStepRetry(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.retry"


class PlanStepRan(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.ran"


class PlanStepRollingBack(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.rolling_back"


class PlanStepPassed(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.passed"


class PlanStepSkipped(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.skipped"


class PlanStepRolledBack(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.rolled_back"


class PlanStepEscalated(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.step.escalated"


class PlanFinished(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.finished"


class PlanFailed(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.failed"


class PlanEscalated(_PlanTransition, frozen=True, kw_only=True):
    KIND: ClassVar[str] = "plan.escalated"


class PlanStopped(Record, frozen=True, kw_only=True):
    """Someone stopped a running plan (``lockstep plan stop``, Ctrl-C on ``plan run``):
    its running step's command was ended and nothing more of it runs, no rollback
    either; a restart does not resume it.  Written by the coordinator, not the plan's
    machine, so it is no transition (``agent`` is who asked for the plan)."""

    KIND: ClassVar[str] = "plan.stopped"

    job: str
    plan: str  # the plan's [plan] name
    step: str = ""  # the step that was current ("" if none had started)
    by: str = ""  # who stopped it
    reason: str = ""


CATALOGUE: tuple[type[Record], ...] = (
    CoordinatorStarted, CoordinatorStopped, CoordinatorPaused, LedgerCompacted, TokensReserved,
    AgentJoined, AgentWatched, AgentAdopted, AgentStale, AgentLeft, AgentForgotten, AgentBlocked,
    ClaimGranted, ClaimRefused, ClaimReleased, ClaimExpired, ReleaseUncommitted, IntentDecided, WriteUnannounced, MergeHeld, MergeFreed,
    LandQueued, LandPreflight, LandVerifying, LandRequeued, LandLanded, LandRefused,
    JobStarted, ProbeResult, VerifyResult, DeploySeen, JobFinished, VerifyFinished, VerifyRefused,
    TurnStarted, StopDecided, HandoffChecked, DoneDecided,
    RuleDecided, RuleResponse, RuleResolved, Notice, PeerCutOff,
    TaskQueued, TaskTaken, TaskDone, MessageSent, InboxDelivered,
    PlanStepStarted, PlanStepRunning, PlanStepRetry, PlanStepRan, PlanStepRollingBack,
    PlanStepPassed, PlanStepSkipped, PlanStepRolledBack, PlanStepEscalated,
    PlanFinished, PlanFailed, PlanEscalated, PlanStopped,
)  # fmt: skip
BY_KIND: dict[str, type[Record]] = {cls.KIND: cls for cls in CATALOGUE}
PLAN_TRANSITIONS: dict[str, type[Record]] = {
    cls.KIND: cls for cls in CATALOGUE if issubclass(cls, _PlanTransition)
}

# ---------------------------------------------------------------- encoding

_encode_json = msgspec.json.Encoder().encode


class _Layout(msgspec.Struct, frozen=True):
    names: tuple[str, ...]  # the data keys, in field order
    optional: bool  # some key may be UNSET (left out)


_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type[Record]) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is None:
        names = tuple(f for f in cls.__struct_fields__ if f not in HEADER) + cls.ALSO_IN_DATA
        optional = any(
            isinstance(f.default, UnsetType) for f in msgspec.structs.fields(cls) if f.name in names
        )
        layout = _LAYOUTS[cls] = _Layout(names, optional)
    return layout


def data_of(record: Record) -> dict[str, Any]:
    """The ``data`` object of ``record`` (UNSET keys left out), as Python values."""
    layout = _layout(type(record))
    if layout.optional:
        return {n: v for n in layout.names if (v := getattr(record, n)) is not UNSET}
    return {n: getattr(record, n) for n in layout.names}


def encode_data(record: Record) -> bytes:
    """The ``data`` column of ``record``: compact JSON."""
    return _encode_json(data_of(record))


def decode(
    kind: str, agent: str | None, session: str | None, token: int | None, data: dict[str, Any]
) -> Record:
    """The typed record of one row.  Raises ``KeyError`` for a kind not in the catalogue
    and ``msgspec.ValidationError`` for data that does not fit its kind.  Keys the
    catalogue does not know are ignored (forward compatible)."""
    cls = BY_KIND[kind]
    return msgspec.convert({**data, "agent": agent, "session": session, "token": token}, cls)
