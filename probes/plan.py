"""Plan executor: a pure state machine over the steps of a ``PLAN.toml``.

Theory
------
A plan is an ordered list of steps.  Each step has optional pre-probes (must pass before
it runs), an action (a command to ``run``, or an agent action to ``expect``) and optional
post-probes (must pass after it).  Exactly one step is *current*; steps run in order.

The machine does no I/O.  The caller loops::

    action = machine.next_action()           # what to do now
    event = <carry the action out>           # Event(kind, step, detail)
    records = machine.apply(event)           # append these to the ledger
    ... until next_action() is Finished

Everything that affects the state lives in ``STEP_TRANSITIONS`` below, in
``_transition`` (which picks among a transition's allowed targets by the step's
settings) and in ``_advance`` (what the plan does when a step ends).  Rules:

1. A transition is keyed by (state of the current step, event kind).  A pair that is not
   in the table, an event naming another step than the current one, or any event after
   the plan ended raises ``IllegalTransition`` and changes nothing.
2. Every accepted event yields one step record, then at most one plan record when the
   plan ends.  Each record carries the event that caused it, so the records alone
   rebuild the exact state: ``PlanMachine.replay(plan, records)`` re-applies the events
   and checks that they reproduce the records (an interrupted plan resumes from its
   ledger; a ledger that does not match its plan is refused).
3. Actions are at-least-once: after a crash between doing an action and appending its
   records, ``next_action`` asks for the same action again.
4. Failure handling is the step's own: ``on_pre_fail`` (skip | escalate) when a
   pre-probe fails; ``on_post_fail`` (retry | rollback | escalate) when the action fails
   or a post-probe fails, once ``retries`` more attempts of the action (not of the
   pre-probes) have failed too (default 1 for ``retry``, 0 otherwise: "retry, then roll
   back" is ``retries = N`` with ``rollback``).  ``retry`` then escalates.  ``rollback``
   runs the ``rollback`` command of the *previous* step; the plan then ends ``failed``
   (cleanly undone) or, if the rollback fails or the previous step was skipped,
   ``escalated`` (a person decides).

Step states: pending, checking_pre, running, retrying, checking_post, rolling_back and
the terminal done, skipped, failed, escalated.  Plan states: running and the terminal
succeeded, failed, escalated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Annotated, Any, ClassVar, Literal, Union

import msgspec

from probes.config import HttpTable, Probe, check_reach, probe_from_table, probe_tables
from probes.schema import Name, Table, Text
from probes.tomlfile import ConfigError, decode
from protocol.errors import LocalError, LockstepError

PLAN_FILENAME = "PLAN.toml"

# ---------------------------------------------------------------- states and events

PENDING = "pending"
CHECKING_PRE = "checking_pre"
RUNNING = "running"
RETRYING = "retrying"
CHECKING_POST = "checking_post"
ROLLING_BACK = "rolling_back"
DONE = "done"
SKIPPED = "skipped"
FAILED = "failed"
ESCALATED = "escalated"
STEP_STATES = (
    PENDING, CHECKING_PRE, RUNNING, RETRYING, CHECKING_POST, ROLLING_BACK,
    DONE, SKIPPED, FAILED, ESCALATED,
)
STEP_TERMINAL = (DONE, SKIPPED, FAILED, ESCALATED)

PLAN_RUNNING = "running"
PLAN_SUCCEEDED = "succeeded"
PLAN_FAILED = "failed"
PLAN_ESCALATED = "escalated"
PLAN_STATES = (PLAN_RUNNING, PLAN_SUCCEEDED, PLAN_FAILED, PLAN_ESCALATED)

STARTED = "started"  # the caller acknowledges StartStep (records the start before work)
PRE_PASSED = "pre_passed"
PRE_FAILED = "pre_failed"
RUN_PASSED = "run_passed"  # the command exited 0 / the agent did the expected action
RUN_FAILED = "run_failed"
POST_PASSED = "post_passed"
POST_FAILED = "post_failed"
ROLLBACK_PASSED = "rollback_passed"
ROLLBACK_FAILED = "rollback_failed"
EVENTS = (
    STARTED, PRE_PASSED, PRE_FAILED, RUN_PASSED, RUN_FAILED, POST_PASSED, POST_FAILED,
    ROLLBACK_PASSED, ROLLBACK_FAILED,
)

# At most this many extra attempts of a step: each is ledger records, and a plan resumes
# after a restart, so ``retries = 1000000000`` on a failing command filled the ledger
# (hundreds of records a second) with no way to stop it.
MAX_RETRIES = 100

# (step state, event) -> the states it may lead to; _transition picks one by the step's
# settings (has pre/post probes, on_pre_fail, on_post_fail, retries left).
#
#   state          event            -> targets
STEP_TRANSITIONS: dict[tuple[str, str], tuple[str, ...]] = {
    (PENDING, STARTED): (CHECKING_PRE, RUNNING),  # RUNNING when there are no pre-probes
    (CHECKING_PRE, PRE_PASSED): (RUNNING,),
    (CHECKING_PRE, PRE_FAILED): (SKIPPED, ESCALATED),  # on_pre_fail
    (RUNNING, RUN_PASSED): (CHECKING_POST, DONE),  # DONE when there are no post-probes
    (RUNNING, RUN_FAILED): (RETRYING, ROLLING_BACK, ESCALATED),  # on_post_fail
    (RETRYING, RUN_PASSED): (CHECKING_POST, DONE),
    (RETRYING, RUN_FAILED): (RETRYING, ROLLING_BACK, ESCALATED),
    (CHECKING_POST, POST_PASSED): (DONE,),
    (CHECKING_POST, POST_FAILED): (RETRYING, ROLLING_BACK, ESCALATED),
    (ROLLING_BACK, ROLLBACK_PASSED): (FAILED,),
    (ROLLING_BACK, ROLLBACK_FAILED): (ESCALATED,),
}

# What the plan does when its current step reaches a terminal state.
PLAN_ON_STEP_END: dict[str, str] = {
    DONE: PLAN_RUNNING,  # next step, or PLAN_SUCCEEDED after the last one
    SKIPPED: PLAN_RUNNING,
    FAILED: PLAN_FAILED,
    ESCALATED: PLAN_ESCALATED,
}

# Record kinds: "plan.step.started" for the STARTED event, else by the state entered.
STARTED_RECORD_KIND = "plan.step.started"
STEP_RECORD_KINDS: dict[str, str] = {
    RUNNING: "plan.step.running",  # pre-probes passed: the action starts
    RETRYING: "plan.step.retry",
    CHECKING_POST: "plan.step.ran",
    ROLLING_BACK: "plan.step.rolling_back",
    DONE: "plan.step.passed",
    SKIPPED: "plan.step.skipped",
    FAILED: "plan.step.rolled_back",
    ESCALATED: "plan.step.escalated",
}
PLAN_RECORD_KINDS: dict[str, str] = {
    PLAN_SUCCEEDED: "plan.finished",
    PLAN_FAILED: "plan.failed",
    PLAN_ESCALATED: "plan.escalated",
}
PLAN_END_KINDS = tuple(PLAN_RECORD_KINDS.values())
# A person stopped the plan (``lockstep plan stop``).  The coordinator writes this
# record, not the machine: a stop is no event of a step (the step did not fail, so
# nothing rolls back), it ends the run where it stands, and a stopped plan is never
# resumed.  ``plan status`` shows the plan as PLAN_STOPPED.
PLAN_STOPPED_KIND = "plan.stopped"
PLAN_STOPPED = "stopped"
# Every ledger kind a plan writes: replaying these rebuilds where each plan stands.
PLAN_LEDGER_KINDS = tuple(sorted({*STEP_RECORD_KINDS.values(), STARTED_RECORD_KIND, *PLAN_END_KINDS}))

ON_PRE_FAIL = ("skip", "escalate")
ON_POST_FAIL = ("retry", "rollback", "escalate")


class IllegalTransition(LocalError):
    """An event the current state does not accept; the machine is unchanged."""


class PlanReplayError(LockstepError):
    """Ledger records that the plan's machine does not reproduce (wrong plan, corrupt)."""


# ---------------------------------------------------------------- the plan


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One step.  ``pre``/``post`` hold resolved probes or names resolved by the caller."""

    id: str
    run: str | None = None  # a shell command
    expect: str | None = None  # an agent action, described for the agent
    agent: str | None = None  # who is expected to act (with ``expect``)
    pre: tuple[Probe | str, ...] = ()
    post: tuple[Probe | str, ...] = ()
    on_pre_fail: str = "escalate"
    on_post_fail: str = "escalate"
    retries: int | None = None  # extra attempts of the action before on_post_fail (None: 1 for retry, else 0)

    @property
    def extra_attempts(self) -> int:
        """Attempts of the action after the first, before ``on_post_fail`` acts: ``retries``
        when given, else 1 for ``retry`` and 0 for ``rollback`` and ``escalate``."""
        if self.retries is not None:
            return self.retries
        return 1 if self.on_post_fail == "retry" else 0
    rollback: str | None = None  # undoes this step when the NEXT step asks for it


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    steps: tuple[Step, ...]
    source: str = PLAN_FILENAME

    @classmethod
    def parse(
        cls,
        text: str,
        source: str = PLAN_FILENAME,
        probes: Mapping[str, Probe] | None = None,
        http: HttpTable | None = None,
    ) -> Plan:
        """Validate a PLAN.toml.

        Probe names in ``pre``/``post`` resolve against the plan's own ``[[probe]]``
        tables, then ``probes`` (the ``[[probe]]``s of lockstep.toml).  When ``probes``
        is None, names the plan does not define stay names for the caller to resolve;
        when it is given, an unknown name is an error.  With ``http`` (lockstep.toml's
        ``[http]``), the plan's own http and consistency probes must reach only what it
        allows, as lockstep.toml's must: checked before any step runs.
        """
        return _parse_plan(text, source, probes, http)

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise LocalError(f"plan {self.name!r} has no step {step_id!r}")

    def index(self, step_id: str) -> int:
        for index, step in enumerate(self.steps):
            if step.id == step_id:
                return index
        raise LocalError(f"plan {self.name!r} has no step {step_id!r}")


class _PlanHeader(Table, kw_only=True):
    name: Text


@cache
def _step_table() -> type:
    """``[[step]]``: ``pre``/``post`` hold probe names or inline probe tables (whose
    ``name`` defaults to STEP.pre.N and which take no ``every``)."""
    probes = list[Union[str, probe_tables(named=False, schedulable=False)]]
    return msgspec.defstruct(
        "StepTable",
        [
            ("id", Name),
            ("run", Union[Text, None], None),  # a shell command
            ("expect", Union[Text, None], None),  # an agent action
            ("agent", Union[Text, None], None),
            ("pre", probes, []),
            ("post", probes, []),
            ("on_pre_fail", Literal[ON_PRE_FAIL], "escalate"),
            ("on_post_fail", Literal[ON_POST_FAIL], "escalate"),
            ("retries", Union[Annotated[int, msgspec.Meta(ge=0, le=MAX_RETRIES)], None], None),
            ("rollback", Union[Text, None], None),
        ],
        bases=(Table,),
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )


@cache
def _plan_file() -> type:
    """The Struct a PLAN.toml decodes into."""
    return msgspec.defstruct(
        "PlanFile",
        [
            ("plan", _PlanHeader),
            ("step", list[_step_table()]),
            ("probe", list[probe_tables(schedulable=False)], []),
        ],
        bases=(Table,),
        namespace={
            "hint": " (a plan has [plan], [[step]] and [[probe]])",
            "missing": {
                "plan": "the [plan] table with its 'name' is missing",
                "step": "a plan needs at least one [[step]]",
            },
        },
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )


def _parse_plan(text: str, source: str, known: Mapping[str, Probe] | None, http: HttpTable | None) -> Plan:
    file = decode(text, _plan_file(), source)
    local_probes: dict[str, Probe] = {}
    for index, table in enumerate(file.probe, start=1):
        probe = probe_from_table(table, f"{source}: [[probe]] #{index}")
        if http is not None:
            check_reach(probe, http, f"{source}: [[probe]] #{index}")
        if probe.name in local_probes:
            raise ConfigError(f"{source}: [[probe]] #{index} key 'name': {probe.name!r} is used twice")
        if known is not None and probe.name in known:
            raise ConfigError(
                f"{source}: [[probe]] #{index} key 'name': {probe.name!r} is also a [[probe]] "
                "of lockstep.toml; use another name or use that one"
            )
        local_probes[probe.name] = probe
    if not file.step:
        raise ConfigError(f"{source}: a plan needs at least one [[step]]")
    steps: list[Step] = []
    for table in file.step:
        steps.append(_parse_step(table, source, steps, local_probes, known))
    return Plan(name=file.plan.name, steps=tuple(steps), source=source)


def _parse_step(
    table: Any,
    source: str,
    earlier: list[Step],
    local_probes: Mapping[str, Probe],
    known: Mapping[str, Probe] | None,
) -> Step:
    step_id = table.id
    where = f"{source}: [[step]] {step_id!r}"
    if any(step.id == step_id for step in earlier):
        raise ConfigError(f"{where} key 'id': {step_id!r} is used by an earlier step")
    if (table.run is None) == (table.expect is None):
        raise ConfigError(f"{where}: a step needs exactly one of 'run' (a command) or 'expect'")
    if table.expect is not None and table.agent is None:
        raise ConfigError(f"{where}: 'expect' needs 'agent' (who is expected to act)")
    if table.run is not None and table.agent is not None:
        raise ConfigError(f"{where} key 'agent': only an 'expect' step names an agent")
    pre = _resolve_probes(table.pre, where, "pre", step_id, local_probes, known)
    post = _resolve_probes(table.post, where, "post", step_id, local_probes, known)
    if table.on_pre_fail == "skip" and not pre:
        raise ConfigError(f"{where} key 'on_pre_fail': 'skip' needs 'pre' probes to fail")
    if table.on_post_fail == "rollback":
        if not earlier:
            raise ConfigError(
                f"{where} key 'on_post_fail': 'rollback' undoes the previous step, and this "
                "is the first step"
            )
        if earlier[-1].rollback is None:
            raise ConfigError(
                f"{where} key 'on_post_fail': 'rollback' runs the previous step's 'rollback' "
                f"command, and step {earlier[-1].id!r} has none"
            )
    return Step(
        id=step_id, run=table.run, expect=table.expect, agent=table.agent, pre=pre, post=post,
        on_pre_fail=table.on_pre_fail, on_post_fail=table.on_post_fail, retries=table.retries,
        rollback=table.rollback,
    )


def _resolve_probes(
    items: list[Any],
    where: str,
    key: str,
    step_id: str,
    local_probes: Mapping[str, Probe],
    known: Mapping[str, Probe] | None,
) -> tuple[Probe | str, ...]:
    """Names resolved against the plan's probes, then lockstep.toml's (``known``);
    inline tables become probes named STEP.KEY.N."""
    result: list[Probe | str] = []
    for index, item in enumerate(items, start=1):
        if not isinstance(item, str):
            result.append(probe_from_table(item, f"{where} key '{key}' item {index}", f"{step_id}.{key}.{index}"))
        elif item in local_probes:
            result.append(local_probes[item])
        elif known is not None and item in known:
            result.append(known[item])
        elif known is None:
            result.append(item)  # resolved by the caller against lockstep.toml
        else:
            names = sorted({*local_probes, *known})
            raise ConfigError(f"{where} key '{key}': {item!r} names no [[probe]] (known: {', '.join(names) or 'none'})")
    return tuple(result)


# ---------------------------------------------------------------- actions and events


class Action(msgspec.Struct, frozen=True, kw_only=True, tag_field="action"):
    """What the caller should do next.  ``outcomes`` are the event kinds it may report;
    the event names ``step`` (always the current step)."""

    outcomes: ClassVar[tuple[str, ...]] = ()


class StartStep(Action, tag="start"):
    """Record that the step starts (no work; reply with a ``started`` event)."""

    outcomes: ClassVar[tuple[str, ...]] = (STARTED,)
    step: str


class RunPreProbes(Action, tag="run_pre"):
    outcomes: ClassVar[tuple[str, ...]] = (PRE_PASSED, PRE_FAILED)
    step: str
    probes: tuple[Probe | str, ...]


class RunCommand(Action, tag="run"):
    outcomes: ClassVar[tuple[str, ...]] = (RUN_PASSED, RUN_FAILED)
    step: str
    cmd: str
    attempt: int


class WaitForAgent(Action, tag="wait_agent"):
    outcomes: ClassVar[tuple[str, ...]] = (RUN_PASSED, RUN_FAILED)
    step: str
    agent: str
    expect: str
    attempt: int


class RunPostProbes(Action, tag="run_post"):
    outcomes: ClassVar[tuple[str, ...]] = (POST_PASSED, POST_FAILED)
    step: str
    probes: tuple[Probe | str, ...]


class RunRollback(Action, tag="rollback"):
    """Run ``cmd``, the rollback command of step ``rollback_of``, because ``step`` failed."""

    outcomes: ClassVar[tuple[str, ...]] = (ROLLBACK_PASSED, ROLLBACK_FAILED)
    step: str
    rollback_of: str
    cmd: str


class Finished(Action, tag="finished"):
    state: str  # succeeded | failed | escalated
    reason: str


class Event(msgspec.Struct, frozen=True):
    """The outcome of an action: ``kind`` from EVENTS, for step ``step``."""

    kind: str
    step: str
    detail: str = ""  # evidence for the ledger (failing probe, exit status)


class TransitionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One ledger row.  ``event``/``step``/``detail`` repeat the event that caused it."""

    kind: str  # plan.step.started, plan.step.passed, ..., plan.finished
    plan: str
    step: str
    event: str
    from_state: str
    to_state: str
    attempt: int
    detail: str = ""
    rollback_of: str | None = None  # the step being rolled back (rolling_back/rolled_back)


class StepStatus(msgspec.Struct, frozen=True):
    id: str
    state: str = PENDING
    attempt: int = 0  # attempts of the action begun so far
    rolled_back_by: str | None = None  # set on a done step that a later step undid


class PlanState(msgspec.Struct, frozen=True):
    """The whole machine state; equal states mean equal futures."""

    state: str
    current: int  # index of the current step; len(steps) once the plan succeeded
    steps: tuple[StepStatus, ...]
    reason: str = ""


# ---------------------------------------------------------------- the machine


class PlanMachine:
    """Drives one plan.  ``next_action`` and ``apply`` are the whole interface."""

    def __init__(self, plan: Plan) -> None:
        _check_plan(plan)
        self.plan = plan
        self._state = PlanState(
            state=PLAN_RUNNING, current=0, steps=tuple(StepStatus(step.id) for step in plan.steps)
        )

    @property
    def state(self) -> PlanState:
        return self._state

    @property
    def plan_state(self) -> str:
        return self._state.state

    @property
    def current_step(self) -> Step | None:
        if self._state.state != PLAN_RUNNING:
            return None
        return self.plan.steps[self._state.current]

    def step_state(self, step_id: str) -> str:
        return self._state.steps[self.plan.index(step_id)].state

    def next_action(self) -> Action:
        state = self._state
        if state.state != PLAN_RUNNING:
            return Finished(state=state.state, reason=state.reason)
        step = self.plan.steps[state.current]
        status = state.steps[state.current]
        if status.state == PENDING:
            return StartStep(step=step.id)
        if status.state == CHECKING_PRE:
            return RunPreProbes(step=step.id, probes=step.pre)
        if status.state in (RUNNING, RETRYING):
            if step.run is not None:
                return RunCommand(step=step.id, cmd=step.run, attempt=status.attempt)
            return WaitForAgent(
                step=step.id, agent=step.agent or "", expect=step.expect or "",
                attempt=status.attempt,
            )
        if status.state == CHECKING_POST:
            return RunPostProbes(step=step.id, probes=step.post)
        if status.state == ROLLING_BACK:
            target = self.plan.steps[state.current - 1]
            return RunRollback(step=step.id, rollback_of=target.id, cmd=target.rollback or "")
        raise LocalError(f"step {step.id!r} is current in terminal state {status.state!r}")

    def apply(self, event: Event) -> list[TransitionRecord]:
        """Take one event; return the records to append.  Raises and changes nothing
        when the event is illegal here."""
        new_state, records = _transition(self.plan, self._state, event)
        self._state = new_state
        return records

    @classmethod
    def replay(cls, plan: Plan, records: Sequence[TransitionRecord]) -> PlanMachine:
        """The machine as it was after ``records`` (from ``apply``) were appended.

        The events are re-applied and must reproduce the records exactly; a ledger cut
        short inside the records of its last event is accepted (the state is what that
        event made it).  Anything else raises ``PlanReplayError``.
        """
        machine = cls(plan)
        position = 0
        while position < len(records):
            first = records[position]
            if first.plan != plan.name:
                raise PlanReplayError(
                    f"record {position} belongs to plan {first.plan!r}, not {plan.name!r}"
                )
            try:
                produced = machine.apply(Event(first.event, first.step, first.detail))
            except IllegalTransition as exc:
                raise PlanReplayError(f"record {position} ({first.kind}) cannot be replayed: {exc}") from None
            given = list(records[position:position + len(produced)])
            if given != produced[:len(given)]:
                raise PlanReplayError(
                    f"records {position}..{position + len(given) - 1} differ from what the plan "
                    f"produces for event {first.event!r} of step {first.step!r}"
                )
            position += len(given)
        return machine


def _check_plan(plan: Plan) -> None:
    """What ``Plan.parse`` guarantees, checked again for plans built in code (a bug there
    would otherwise surface as a wrong rollback target, far from its cause)."""
    if not plan.steps:
        raise LocalError(f"plan {plan.name!r} has no steps")
    seen: set[str] = set()
    for index, step in enumerate(plan.steps):
        problem = None
        if step.id in seen:
            problem = "its id is used twice"
        elif (step.run is None) == (step.expect is None):
            problem = "it needs exactly one of run / expect"
        elif step.expect is not None and step.agent is None:
            problem = "expect needs an agent"
        elif step.on_pre_fail not in ON_PRE_FAIL or step.on_post_fail not in ON_POST_FAIL:
            problem = "on_pre_fail / on_post_fail out of range"
        elif step.retries is not None and step.retries < 0:
            problem = "retries is negative"
        elif step.on_post_fail == "rollback" and (index == 0 or plan.steps[index - 1].rollback is None):
            problem = "on_post_fail = rollback needs a previous step with a rollback command"
        if problem:
            raise LocalError(f"plan {plan.name!r} step {step.id!r}: {problem}")
        seen.add(step.id)


def _transition(
    plan: Plan, state: PlanState, event: Event
) -> tuple[PlanState, list[TransitionRecord]]:
    """(next state, records) for ``event``; raises IllegalTransition, touching nothing."""
    if state.state != PLAN_RUNNING:
        raise IllegalTransition(f"plan {plan.name!r} has ended ({state.state}); got {event.kind!r}")
    if event.kind not in EVENTS:
        raise IllegalTransition(f"unknown event kind {event.kind!r}")
    step = plan.steps[state.current]
    if event.step != step.id:
        raise IllegalTransition(
            f"event {event.kind!r} names step {event.step!r}, but the current step is {step.id!r}"
        )
    status = state.steps[state.current]
    allowed = STEP_TRANSITIONS.get((status.state, event.kind))
    if allowed is None:
        raise IllegalTransition(
            f"step {step.id!r} in state {status.state!r} does not accept {event.kind!r}"
        )

    attempt = status.attempt
    rolled_back_step: Step | None = None
    reason = ""
    kind = event.kind
    if kind == STARTED:
        target = CHECKING_PRE if step.pre else RUNNING
        attempt = 1 if target == RUNNING else 0
    elif kind == PRE_PASSED:
        target = RUNNING
        attempt = 1
    elif kind == PRE_FAILED:
        target = SKIPPED if step.on_pre_fail == "skip" else ESCALATED
        reason = f"pre-probes of step {step.id!r} failed"
    elif kind == RUN_PASSED:
        target = CHECKING_POST if step.post else DONE
    elif kind == POST_PASSED:
        target = DONE
    elif kind in (RUN_FAILED, POST_FAILED):
        what = "action" if kind == RUN_FAILED else "post-probes"
        retries = step.extra_attempts
        if attempt <= retries:  # retry first, whatever comes after (retry, then roll back)
            target = RETRYING
            attempt += 1
        elif step.on_post_fail == "retry":
            target = ESCALATED
            reason = f"{what} of step {step.id!r} failed; {retries} retries exhausted"
        elif step.on_post_fail == "rollback":
            previous = plan.steps[state.current - 1]
            previous_state = state.steps[state.current - 1].state
            if previous_state == DONE:
                target = ROLLING_BACK
                rolled_back_step = previous
            else:
                target = ESCALATED
                reason = (
                    f"{what} of step {step.id!r} failed and previous step {previous.id!r} "
                    f"is {previous_state}, so there is nothing safe to roll back"
                )
        else:
            target = ESCALATED
            reason = f"{what} of step {step.id!r} failed" + (f" after {retries} retries" if retries else "")
    elif kind == ROLLBACK_PASSED:
        target = FAILED
        rolled_back_step = plan.steps[state.current - 1]
        reason = (
            f"step {step.id!r} failed; previous step {rolled_back_step.id!r} was rolled back"
        )
    else:  # ROLLBACK_FAILED
        target = ESCALATED
        rolled_back_step = plan.steps[state.current - 1]
        reason = f"step {step.id!r} failed and rolling back step {rolled_back_step.id!r} failed"
    if target not in allowed:  # the guards above and the table disagree: a bug here
        raise LocalError(f"{(status.state, kind)} chose {target!r}, table allows {allowed}")

    steps = list(state.steps)
    steps[state.current] = msgspec.structs.replace(status, state=target, attempt=attempt)
    if kind == ROLLBACK_PASSED and rolled_back_step is not None:
        steps[state.current - 1] = msgspec.structs.replace(
            steps[state.current - 1], rolled_back_by=step.id
        )
    records = [
        TransitionRecord(
            kind=STARTED_RECORD_KIND if kind == STARTED else STEP_RECORD_KINDS[target],
            plan=plan.name,
            step=step.id,
            event=kind,
            from_state=status.state,
            to_state=target,
            attempt=attempt,
            detail=event.detail,
            rollback_of=None if rolled_back_step is None else rolled_back_step.id,
        )
    ]
    new_state = PlanState(state=PLAN_RUNNING, current=state.current, steps=tuple(steps))
    if target in STEP_TERMINAL:
        new_state = _advance(plan, new_state, target, reason)
        if new_state.state != PLAN_RUNNING:
            records.append(
                TransitionRecord(
                    kind=PLAN_RECORD_KINDS[new_state.state],
                    plan=plan.name,
                    step=step.id,
                    event=kind,
                    from_state=PLAN_RUNNING,
                    to_state=new_state.state,
                    attempt=attempt,
                    detail=event.detail,
                    rollback_of=None if rolled_back_step is None else rolled_back_step.id,
                )
            )
    return new_state, records


def _advance(plan: Plan, state: PlanState, step_end: str, reason: str) -> PlanState:
    """The plan after its current step ended in ``step_end``."""
    plan_state = PLAN_ON_STEP_END[step_end]
    if plan_state != PLAN_RUNNING:
        return msgspec.structs.replace(state, state=plan_state, reason=reason)
    following = state.current + 1
    if following == len(plan.steps):
        return msgspec.structs.replace(
            state, state=PLAN_SUCCEEDED, current=following, reason="every step done or skipped"
        )
    return msgspec.structs.replace(state, current=following)

