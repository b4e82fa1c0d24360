"""Wire types: everything agents and the coordinator say to each other.

Theory
------
* Every message is a frozen ``msgspec.Struct`` tagged by ``type`` (a short string);
  the union of all of them is decoded by one reused decoder per direction.
* Requests carry ``req``, an id the client chooses; the reply echoes it, so a client
  may have several requests in flight on one DEALER socket.  ``Heartbeat`` is the only
  one-way request (it gets an answer only when its session is no longer live, or when
  it asks for one with ``echo``).
* Schema evolution: new fields get defaults; an existing field's type never changes;
  unknown fields are refused (``forbid_unknown_fields``) so a typo in a hand-written
  client fails loudly instead of being ignored.  ``PROTOCOL_VERSION`` changes only when
  an old client could misread a new coordinator.
* Frames: a client sends one frame (the encoded message).  Publications are two
  frames: the topic (the publication's ``kind``, so subscribers can filter by prefix)
  and the encoded ``Publication``.

docs/protocol.md is the catalogue of these types for authors of clients in other
languages; tests/test_protocol.py checks that it names every type and field.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from .errors import PeerError

PROTOCOL_VERSION = 1
# The names an agent may go by: checked by the coordinator at hello, and by a client that
# would otherwise start on a name no request of it can use (``lockstep mcp --agent``).
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")
# Above this a message is refused with code "too_large"; the ROUTER's MAXMSGSIZE (a
# hard cap, see ``HARD_FRAME_LIMIT``) drops bigger frames with their connection.
MAX_MESSAGE_BYTES = 256 * 1024
HARD_FRAME_LIMIT = 1024 * 1024

Access = Literal["exclusive", "shared"]
Verdict = Literal["allow", "warn", "block"]
SessionKind = Literal["session", "run", "oneshot"]


class Message(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", forbid_unknown_fields=True, omit_defaults=True, gc=False
):
    """Base of every wire message.

    ``gc=False``: the cyclic collector never tracks a message (its fields are decoded
    data, which cannot refer back to it).  Under load the loop makes and keeps
    thousands per second (kept answers, publications), and each tracked one costs a
    scan in every young collection it lives through."""


# --------------------------------------------------------------------------- requests


class Request(Message, frozen=True, kw_only=True):
    req: int = 0


class Hello(Request, frozen=True, kw_only=True, tag="hello"):
    """Open a session for ``agent``, attach to its live one, or resume ``session``.

    ``kind``: ``session`` (a client that heartbeats), ``run`` (``lockstep run``: heartbeats
    and has its command's pid watched), ``oneshot`` (a CLI call: attaches to the agent's
    live session if there is one, else opens one that lives for ``ttl`` renewed by each
    call, or for as long as ``pid`` lives).
    """

    v: int = PROTOCOL_VERSION
    agent: str
    kind: SessionKind = "session"
    repo: str = ""
    worktree: str = ""
    host: str = ""
    pid: int | None = None
    pid_started: float | None = None
    session: str | None = None
    ttl: float | None = None


class Heartbeat(Request, frozen=True, kw_only=True, tag="hb"):
    """The agent is alive.  With ``echo`` the coordinator answers ``Ok`` (the coordinator
    is alive): a client that hears nothing for heartbeat x liveness knows it is gone."""

    session: str
    echo: bool = False


class Watch(Request, frozen=True, kw_only=True, tag="watch"):
    """Watch a local pid for this session: when it exits the agent is gone at once."""

    session: str
    pid: int
    pid_started: float | None = None


MIN_TTL = 0.01  # seconds: a shorter claim or one-shot session would have ended before it was used
MERGING_LIMIT = 16  # commits a merge in progress may name (an octopus merge's MERGE_HEAD lines)


class Claim(Request, frozen=True, kw_only=True, tag="claim"):
    session: str
    paths: list[str]
    shared: bool = False
    ttl: float | None = None
    head: str | None = None  # the commit checked out in the agent's worktree (fresh-base gate)
    merging: list[str] = []  # a merge in progress in that worktree: the commits it brings (MERGE_HEAD)
    retry: bool = False  # a waiting client's retry: a refusal is answered, not recorded again


class Release(Request, frozen=True, kw_only=True, tag="release"):
    """Release some paths, or ``all``; ``force`` (operator) frees anyone's claim."""

    session: str | None = None
    paths: list[str] = []
    all: bool = False
    force: bool = False
    reason: str = ""
    by: str = ""
    # The paths with uncommitted changes in the agent's worktree, as its client saw them
    # just before (null: it did not look): released ones among them are warned about.
    uncommitted: list[str] | None = None


class Abandon(Request, frozen=True, kw_only=True, tag="abandon"):
    """Operator: give up on ``branch``; the merge holds waiting for it are freed."""

    branch: str
    reason: str = ""
    by: str = ""


class Intent(Request, frozen=True, kw_only=True, tag="intent"):
    """The agent is about to write these concrete files; ``token`` fences the write."""

    session: str
    paths: list[str]
    token: int | None = None
    head: str | None = None  # the commit checked out in the agent's worktree (fresh-base gate)
    merging: list[str] = []  # a merge in progress in that worktree: the commits it brings (MERGE_HEAD)
    # Files the call *may* rewrite (a formatter run on a folder): checked against other
    # agents' holds like ``paths``, never claimed (the after-call report claims what changed).
    maybe: list[str] = []


class Wrote(Request, frozen=True, kw_only=True, tag="wrote"):
    """Files the agent has already written, seen after the fact (a hook comparing the
    worktree before and after a tool call, a watcher): the same gate as an intent
    (a free path is auto-claimed); a path another agent holds is a ``write.unannounced``
    event and publication, and the ``block``/``warn`` decision names the holders."""

    session: str
    paths: list[str]
    source: str = ""  # what saw the write, e.g. "claude PostToolUse Bash", "run watcher"
    head: str | None = None  # the commit checked out in the agent's worktree
    merging: list[str] = []  # a merge in progress in that worktree: the commits it brings (MERGE_HEAD)


class Status(Request, frozen=True, kw_only=True, tag="status"):
    """The registry, or the part of it that concerns ``agent`` and/or paths overlapping
    the pattern ``path``.  Over ``STATUS_LIST_LIMIT`` bytes the lists are left out and
    the reply is a summary (``summarised``: counts, claims per holder, a note)."""

    agent: str | None = None
    path: str | None = None


# Above this (estimated encoded size of what a status would list) the reply is a summary.
STATUS_LIST_LIMIT = 1024 * 1024


class Fresh(Request, frozen=True, kw_only=True, tag="fresh"):
    """Anyone (no session): are these paths fresh in a worktree at ``head``, or did the
    integration branch change them in a commit ``head`` lacks (a stale base)?  The git
    guard asks it for a person's commit; an agent's intent carries its head instead."""

    paths: list[str]
    head: str
    merging: list[str] = []  # a merge in progress in that worktree: the commits it brings (MERGE_HEAD)


class Bye(Request, frozen=True, kw_only=True, tag="bye"):
    """End the session cleanly: its claims are free at once."""

    session: str
    reason: str = "bye"


class Shutdown(Request, frozen=True, kw_only=True, tag="shutdown"):
    reason: str = "stop requested"


class ProbeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One deterministic check to run (see probes/kinds/ for each kind's params)."""

    kind: str
    name: str = ""
    params: dict[str, Any] = {}
    timeout: float | None = None


class Check(Request, frozen=True, kw_only=True, tag="check"):
    """Run one probe in the requester's worktree (``cwd``); answered ``accepted``."""

    probe: ProbeRequest
    cwd: str = ""
    session: str | None = None


class Verify(Request, frozen=True, kw_only=True, tag="verify"):
    """Run the project's verify suite (lockstep.toml, else auto-detected) in ``cwd``."""

    cwd: str = ""
    session: str | None = None
    new_turn: bool = False  # the agent starts a new turn: its repair-loop count resets
    venv: str = ""  # VIRTUAL_ENV of the shell that asked: checks use it (probes.environment)
    tree: str = ""  # the content id of the worktree (protocol.content): a pass on it answers at once
    turn_end: bool = False  # asked by a Stop hook: the turn-end gate decides (see docs/protocol.md)
    # With turn_end, for the gate under [land] required: the worktree's branch and commit,
    # and its commit's tree (``tree`` differing from it: uncommitted changes).
    branch: str = ""
    head: str = ""
    head_tree: str = ""


class Done(Request, frozen=True, kw_only=True, tag="done"):
    """The agent declares its goal finished: passes only after a passing verify run
    that started after its last write intent."""

    session: str
    tree: str = ""  # the content id of the agent's worktree now (protocol.content)
    head_tree: str = ""  # the tree of its checked-out commit: equal to ``tree`` means nothing changed


class TurnStart(Request, frozen=True, kw_only=True, tag="turn"):
    """The agent starts a new turn (a user prompt): its repair-loop count starts again,
    and the content it starts from is remembered (a turn that changes nothing needs no
    verify at its end)."""

    session: str
    tree: str = ""


class Compact(Request, frozen=True, kw_only=True, tag="compact"):
    """Operator: drop ledger events older than ``keep`` seconds (None: the coordinator's
    ``[ledger] keep``) that a fresh registry snapshot covers (the coordinator snapshots
    first, then removes in slices)."""

    keep: float | None = None


class JobQuery(Request, frozen=True, kw_only=True, tag="job"):
    job: str
    # Stop the job (a check or verify run whose requester no longer waits: Ctrl-C).
    # Only the session that asked for it (``session``; None for an anonymous one) may.
    cancel: bool = False
    session: str | None = None
    # Results the asker already has: the reply's ``results`` start after them (a client
    # following a job of thousands of checks would otherwise get them all each poll).
    since: int = 0
    # Stop a running plan (``lockstep plan stop``): from any session on the coordinator's
    # host; ``job`` may also be the plan's [plan] name.  ``cancel`` on a plan stops it
    # the same way, from its own session only (Ctrl-C on ``plan run``).  ``by`` and
    # ``reason`` go into the ``plan.stopped`` record.
    stop: bool = False
    by: str = ""
    reason: str = ""


class PlanRun(Request, frozen=True, kw_only=True, tag="plan_run"):
    plan: str  # the PLAN.toml text
    source: str = ""  # its path, for messages
    cwd: str = ""
    session: str | None = None


class Land(Request, frozen=True, kw_only=True, tag="land"):
    """Queue ``branch`` (at commit ``head``) for landing on the integration branch:
    merged without conflicts, verified on the merged tree, then the branch moves."""

    branch: str  # refs/heads/NAME (or NAME)
    head: str  # the branch's commit when asked: if it moves while queued, the landing is stale
    session: str | None = None
    cwd: str = ""
    venv: str = ""  # VIRTUAL_ENV of the shell that asked: the checks use it, as for verify
    # From a clone on another host: ``branch`` as a git bundle (its commits the clone's
    # remote-tracking branches lack), fetched on the coordinator's host into a private ref.
    bundle: bytes = b""


class LandQuery(Request, frozen=True, kw_only=True, tag="land_query"):
    job: str


class Enroll(Request, frozen=True, kw_only=True, tag="enroll"):
    """From a clone on another host, sent with the one-time enrollment key of a join
    token: bind ``key`` (the agent's own CURVE public key, Z85) to the invited name."""

    key: str
    roots: list[str] = []  # the clone's root commit(s): the same repository?
    host: str = ""


class Keys(Request, frozen=True, kw_only=True, tag="keys"):
    """Operator, on the coordinator's host only: ``invite`` NAME (a join token valid
    for ``ttl`` seconds), ``list`` the keys, ``revoke`` NAME's key at once."""

    op: Literal["invite", "list", "revoke"]
    name: str = ""
    ttl: float | None = None


# ---------------------------------------------------------------- remote workers
# ``lockstep worker`` runs on an agent's own host and runs the probes of that agent's
# worktree there, in the Majordomo manner: ready, heartbeats both ways, work, results.
# It connects with the agent's own key; these are its requests (the ``work`` it gets
# and the coordinator's beats are among the replies).


class WorkerReady(Request, frozen=True, kw_only=True, tag="worker_ready"):
    """A worker is ready to run ``agent``'s probes (the name its key is bound to) in
    ``worktrees`` on ``host``; answered ``worker_welcome``.  Sent again after a silence
    (the coordinator may have restarted)."""

    agent: str
    host: str = ""
    worktrees: list[str] = []
    pid: int | None = None


class WorkerBeat(Request, frozen=True, kw_only=True, tag="worker_hb"):
    """A worker's heartbeat (one way: the coordinator beats with ``worker_ping``)."""


class WorkProgress(Request, frozen=True, kw_only=True, tag="work_progress"):
    """One probe's result (a ``ProbeResult``) of the work ``job``, as it finished;
    ``about`` says where and how a verify check ran; ``total`` the checks in all."""

    job: str
    result: dict[str, Any]
    about: dict[str, Any] = {}
    total: int = 0


class WorkDone(Request, frozen=True, kw_only=True, tag="work_done"):
    """The work ``job`` is over: ``order`` names its results in spec order; ``tree`` the
    worktree's content id (a verify run on content that held still); ``error`` why it
    could not run at all; ``results`` any result not sent as ``work_progress``."""

    job: str
    order: list[str] = []
    tree: str = ""
    error: str = ""
    results: list[dict[str, Any]] = []  # results not sent as progress (a single check's: one message, not two)
    restored: dict[str, Any] = {}  # a ``restore``: what it did (a ``protocol.restore.Restored``)


class WorkerBye(Request, frozen=True, kw_only=True, tag="worker_bye"):
    """The worker stops (its running work, if any, fails with ``worker lost``)."""

    reason: str = ""


class Tasks(Request, frozen=True, kw_only=True, tag="tasks"):
    """Tasks for agents (queued by a rule's ``queue_task``, or by hand): ``list`` them
    (``agent``: that agent's and everyone's), ``take`` or finish (``done``) task ``id``
    as the session's agent, or ``add`` one (``text``) for ``agent`` (None: anyone)."""

    op: Literal["list", "take", "done", "add"] = "list"
    agent: str | None = None
    id: int = 0
    text: str = ""  # add: the task; done: a note
    session: str | None = None
    all: bool = False  # list: finished tasks too


class SendText(Request, frozen=True, kw_only=True, tag="send"):
    """A short message to agent ``to``, shown to it at its next turn (its hooks) or
    when it asks (``inbox``).  ``session``: the sender (none: the operator)."""

    to: str
    text: str
    session: str | None = None


class InboxQuery(Request, frozen=True, kw_only=True, tag="inbox"):
    """The session's agent's messages and tasks not shown to it yet; answering marks them
    shown (``inbox.delivered``).  ``all``: also recent messages already shown and every
    open task of the agent."""

    session: str
    via: str = ""  # what shows them: a hook event name, "inbox", "mcp"
    all: bool = False


class Ran(Request, frozen=True, kw_only=True, tag="ran"):
    """The agent ran a shell command (seen by its after-tool hook): the ``[[trigger]]``s
    of lockstep.toml that match it start their probes as a job."""

    session: str
    command: str
    cwd: str = ""


MAX_TEXT_BYTES = 4000  # a message's or a task's text, in UTF-8


# ---------------------------------------------------------------------------- replies


class Reply(Message, frozen=True, kw_only=True):
    req: int = 0


class Conflict(msgspec.Struct, frozen=True, kw_only=True):
    """Why a path is not yours: who holds it, by which pattern, and for how long."""

    holder: str
    pattern: str
    access: str
    token: int | None = None
    reason: str = ""
    retry_after: float | None = None


class StaleBase(msgspec.Struct, frozen=True, kw_only=True):
    """A path the integration branch changed in a commit the agent's HEAD lacks."""

    path: str
    commit: str
    author: str = ""
    subject: str = ""
    branch: str = "main"


class Welcome(Reply, frozen=True, kw_only=True, tag="welcome"):
    session: str
    agent: str
    epoch: int
    mode: str
    heartbeat: float
    liveness: int
    pub: list[str] = []
    resumed: bool = False
    notice: str = ""


class Granted(Reply, frozen=True, kw_only=True, tag="granted"):
    token: int
    patterns: list[str]
    warnings: list[Conflict] = []


class Refused(Reply, frozen=True, kw_only=True, tag="refused"):
    reason: str
    conflicts: list[Conflict] = []
    stale: list[StaleBase] = []
    conflicts_total: int = 0  # when more conflicts than listed: how many in all


class Decision(Reply, frozen=True, kw_only=True, tag="decision"):
    """A gate decision on a write intent."""

    verdict: Verdict
    reason: str
    paths: list[str] = []
    token: int | None = None
    holders: list[str] = []
    conflicts: list[Conflict] = []
    stale: list[StaleBase] = []
    conflicts_total: int = 0  # when more conflicts than listed: how many in all
    inbox: int = 0  # messages and tasks waiting to be shown to the agent (ask with ``inbox``)


class Released(Reply, frozen=True, kw_only=True, tag="released"):
    patterns: list[str]
    holders: list[str] = []
    uncommitted: list[str] = []  # released paths with uncommitted changes in the holder's worktree
    warning: str = ""


class AgentInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    state: Literal["alive", "stale", "gone"]
    session: str
    kind: str
    pid: int | None
    worktree: str
    last_seen_ago: float
    reason: str = ""
    ttl_left: float | None = None  # a live one-shot session's TTL: seconds until it runs out


class ClaimInfo(msgspec.Struct, frozen=True, kw_only=True):
    pattern: str
    holder: str
    token: int
    access: str
    since_ago: float
    expires_in: float | None = None


class HoldInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A path of a stale holder that nobody may have until ``free_in`` runs out."""

    pattern: str
    former_holder: str
    free_in: float


class JobInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A check, verify run or plan still running."""

    job: str
    kind: str
    agent: str | None = None
    done: int = 0
    total: int = 0
    running_for: float = 0.0


class MergeHoldInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A released path kept from others until the holder's commits reach main."""

    path: str
    holder: str
    branch: str
    commits: list[str]
    reason: str = ""


class StatusReply(Reply, frozen=True, kw_only=True, tag="status_reply"):
    mode: str
    epoch: int
    endpoints: list[str]
    pub: list[str]
    agents: list[AgentInfo]
    claims: list[ClaimInfo]
    holds: list[HoldInfo] = []
    merge_holds: list[MergeHoldInfo] = []
    seq: int = 0
    statistics: dict[str, Any] = {}
    jobs: list[JobInfo] = []  # running jobs (filled by the coordinator's shell)
    landings: list[Landing] = []  # the merge queue, in order (filled by the coordinator's shell)
    # What matched the filters, listed or not: {"agents", "claims", "holds", "merge_holds"}.
    counts: dict[str, int] = {}
    summarised: bool = False  # too much to list: claims, holds and merge holds left out
    claims_by_holder: dict[str, int] = {}  # when summarised: how many claims each agent holds
    note: str = ""  # when summarised: how to narrow it down


class Accepted(Reply, frozen=True, kw_only=True, tag="accepted"):
    """A job (check, verify run, plan) started; follow it on PUB or with ``job``."""

    job: str
    kind: str
    checks: list[str] = []


class Gate(Reply, frozen=True, kw_only=True, tag="gate"):
    """A gate decision on a check, verify run, ``done`` or plan."""

    subject: str  # "check" | "verify" | "done" | "plan" | "stop" (the turn-end gate)
    verdict: Literal["pass", "fail", "escalate", "block", "allow"]
    reason: str
    job: str = ""
    agent: str | None = None
    results: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    tree: str = ""  # a verify run: the content id it ran on ("" if unknown or it changed during the run)


class JobReply(Reply, frozen=True, kw_only=True, tag="job_reply"):
    job: str
    kind: str
    state: Literal["running", "finished"]
    done: int = 0
    total: int = 0
    results: list[dict[str, Any]] = []
    gate: Gate | None = None
    stopped: bool = False  # a plan that ended because someone stopped it (``plan stop``)


class LandCommit(msgspec.Struct, frozen=True, kw_only=True):
    """An integration-branch commit a landing conflicts with."""

    commit: str
    author: str = ""
    subject: str = ""
    agent: str | None = None  # the agent whose landing brought it, when known


class LandConflict(msgspec.Struct, frozen=True, kw_only=True):
    """One conflicting file of a landing: its hunks and the commits it meets."""

    path: str
    kind: str = "content"  # what git says: content, add/add, modify/delete, ...
    hunks: list[dict[str, Any]] = []  # {"line": N, "ours": [...], "theirs": [...]}
    commits: list[LandCommit] = []


class Landing(Reply, frozen=True, kw_only=True, tag="landing"):
    """Where a landing stands, and its verdict once decided."""

    job: str
    agent: str | None = None
    branch: str = ""
    target: str = ""
    head: str = ""
    stage: Literal["queued", "preflight", "verifying", "landing", "finished"] = "queued"
    position: int = 0  # landings ahead of it in the queue (0: it is the one running)
    verdict: Literal["", "landed", "conflict", "failed", "stale", "blocked"] = ""
    reason: str = ""
    commit: str = ""  # the new integration commit (landed)
    base: str = ""  # the integration commit it was merged onto
    changed: list[str] = []  # the files the landing changes on the integration branch
    conflicts: list[LandConflict] = []
    results: list[dict[str, Any]] = []  # the checks run on the merged tree, failures first
    attempts: int = 0  # merges tried (a lost compare-and-swap tries again)
    waited: float = 0.0  # seconds queued behind other landings
    took: float = 0.0  # seconds from queued to verdict


class TaskInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    task: str
    agent: str | None = None  # whom it is for (None: anyone)
    state: str = "queued"  # "queued" | "taken" | "done"
    by: str | None = None  # who took it
    because: str = ""  # the finding that queued it
    queued_by: str = ""  # the person or agent that queued it by hand


class MessageInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    text: str
    sender: str = ""  # "" : the operator
    delivered: bool = False  # shown before this reply


class TasksReply(Reply, frozen=True, kw_only=True, tag="tasks_reply"):
    tasks: list[TaskInfo] = []
    message: str = ""


class InboxReply(Reply, frozen=True, kw_only=True, tag="inbox_reply"):
    agent: str
    messages: list[MessageInfo] = []
    tasks: list[TaskInfo] = []


class Ok(Reply, frozen=True, kw_only=True, tag="ok"):
    message: str = ""


class Compacted(Reply, frozen=True, kw_only=True, tag="compacted"):
    removed: int  # events removed
    upto: int  # the snapshot they were covered by
    kept: int  # events left in the ledger
    db_size_bytes: int = 0
    wal_size_bytes: int = 0


class Error(Reply, frozen=True, kw_only=True, tag="error"):
    code: str
    message: str


class KeyInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # the agent name the key may act as
    key: str  # its CURVE public key (Z85)
    state: str  # "enrolled", "revoked" or "invited" (a join token not used yet)
    host: str = ""
    since: float = 0.0  # unix time it was enrolled / revoked / invited
    expires: float | None = None  # an invitation's end


class Enrolled(Reply, frozen=True, kw_only=True, tag="enrolled"):
    agent: str
    repo: str  # the repository as the coordinator names it


class KeysReply(Reply, frozen=True, kw_only=True, tag="keys_reply"):
    keys: list[KeyInfo] = []
    token: str = ""  # for ``invite``: the one line ``lockstep join`` takes
    message: str = ""


class WorkerWelcome(Reply, frozen=True, kw_only=True, tag="worker_welcome"):
    """A worker is registered: beat every ``heartbeat`` s; either side is lost after
    ``heartbeat`` x ``liveness`` of silence."""

    agent: str
    heartbeat: float
    liveness: int
    # The work the coordinator still waits for from this worker (a worker it knew: its
    # running work ids; a worker it did not: none).  A worker saying ready again drops
    # whatever else it started before: no job waits for it (the coordinator restarted,
    # or lost it to silence).  None: not said (a coordinator older than this field).
    running: list[str] | None = None


class Work(Reply, frozen=True, kw_only=True, tag="work"):
    """To a worker (unsolicited, ``req`` 0): ``suite`` runs ``specs`` (``ProbeSpec``s)
    as given; ``verify`` builds the verify suite of the worktree holding ``cwd`` there
    and runs it; ``restore`` puts that worktree back to content ``tree`` (a rule's
    ``rollback``: protocol/restore.py), leaving paths in ``held`` alone.  An autofix
    check's change to a path in ``held`` (pattern, holder pairs: other agents' claims)
    is undone."""

    job: str
    kind: Literal["suite", "verify", "restore"]
    cwd: str = ""
    agent: str = ""
    venv: str = ""
    specs: list[dict[str, Any]] = []
    held: list[list[str]] = []
    tree: str = ""  # ``restore``: the content to put the worktree back to (a rule's rollback)


class WorkCancel(Reply, frozen=True, kw_only=True, tag="work_cancel"):
    """To a worker (unsolicited, ``req`` 0): the work ``job`` is over for the coordinator
    (its requester cancelled it, or its job ended without its result): end its probes
    now (their process groups) and free their slots.  The worker answers with the
    work's ``work_done`` (``error`` says it was cancelled), which the coordinator, no
    longer waiting for it, only logs; a job the worker no longer runs is ignored.  A
    worker older than this message skips it (its reader ignores types it cannot read)."""

    job: str
    reason: str = ""


class WorkerPing(Reply, frozen=True, kw_only=True, tag="worker_ping"):
    """The coordinator's heartbeat to a worker."""


class WorkerDismissed(Reply, frozen=True, kw_only=True, tag="worker_dismissed"):
    """The coordinator dropped this worker (its key was revoked, another worker of the
    same key replaced it): it stops; with ``again`` it only says ``worker_ready`` again
    (the coordinator restarted and does not know it)."""

    reason: str
    again: bool = False


# ----------------------------------------------------------------------- publications


class Publication(Message, frozen=True, kw_only=True, tag="pub"):
    """Sent on PUB with ``kind`` as the topic frame.  ``seq`` increases by one per
    publication within an ``epoch``: a gap means the subscriber missed some (PUB drops
    at its high-water mark) and should take a fresh ``Status`` snapshot."""

    seq: int
    epoch: int
    kind: str
    agent: str | None = None
    data: dict[str, Any] = {}


ClientMessage = (
    Hello | Heartbeat | Watch | Claim | Release | Intent | Status | Bye | Shutdown | Abandon
    | Check | Verify | Done | JobQuery | PlanRun | Fresh | Compact | Land | LandQuery | Enroll | Keys | Wrote | TurnStart
    | WorkerReady | WorkerBeat | WorkProgress | WorkDone | WorkerBye | Tasks | SendText | InboxQuery | Ran
)
ServerMessage = (
    Welcome | Granted | Refused | Decision | Released | StatusReply | Ok | Error
    | Accepted | Gate | JobReply | Compacted | Landing | Enrolled | KeysReply | TasksReply | InboxReply
    | WorkerWelcome | Work | WorkCancel | WorkerPing | WorkerDismissed
)


def check_agent_name(name: str) -> None:
    """``PeerError("bad_agent")`` for a name ``AGENT_NAME`` does not match."""
    if not AGENT_NAME.fullmatch(name or ""):
        raise PeerError(
            "bad_agent",
            f"invalid agent name {name!r}: use 1-64 characters, letters, digits and . _ - @ +, starting with a letter or digit",
        )
