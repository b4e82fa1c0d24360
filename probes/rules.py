"""Findings -> deterministic responses, bounded repair loops and the ``done`` gate.

Theory
------
Probes report *findings*: a short fixed phrase ("build produced nothing", "write lost",
"endpoint failing") plus the probe, the agent and free-text details.  What to do about a
finding is never judged; it is looked up in a table of rules.

Matching order: the rules from ``lockstep.toml`` in file order, then ``DEFAULT_RULES`` in
their order.  For each finding the FIRST rule that matches wins.  A rule matches a
finding when

* its ``finding`` phrase equals the finding's (case and runs of spaces ignored), or the
  rule's phrase is ``*``;
* its ``probe`` filter, if set, equals the finding's probe name;
* at least ``min_failing`` distinct probes report a finding the rule would match (phrase
  and filter) in the same batch passed to ``decide``.  A rule that fails only this count
  lets the finding fall through to later rules ("one endpoint failing" notifies, "two or
  more" restart).

One response per rule per batch for group rules (``min_failing`` > 1: three endpoints
down is one restart), one per (rule, agent, finding phrase) otherwise.  Responses come
out in the order of the first finding that triggered each.  Findings whose rule matched
nothing are impossible: the last default rule is the catch-all ``*`` -> notify, so no
finding is ever dropped silently.

Retries are bounded: ``RepairState`` counts retries per (agent, finding phrase); a retry
rule with ``max = N`` answers ``retry`` N times, then ``notify`` with the reason
"retry bound reached".  ``RepairState`` is immutable: ``decide`` returns the new one.

All of it is pure: no clock (``now`` is a parameter), no I/O.  (The repair-loop bound
and the ``done`` gate need the ledger's order of writes and verify runs, so they live in
the coordinator's registry: coordinator/registry.py and Gates.done_gate in
coordinator/checks.py.  The coordinator keeps the ``RepairState`` there too, rebuilt
from its ``rule.decided`` records.)
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Any

import msgspec

from probes.config import DEFAULT_RETRY_MAX, RESPONSE_ACTIONS, Config, Rule
from probes.model import (
    BUILD_PRODUCED_NOTHING,
    ENDPOINT_FAILING,
    WRITE_LOST,
    ProbeResult,
)
from protocol.errors import LocalError

ANY_FINDING = "*"


def normalize_finding(phrase: str) -> str:
    """The form findings are compared in: lower case, single spaces, no edge spaces."""
    return re.sub(r"\s+", " ", phrase.strip().lower())


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """What a probe saw.  ``probe`` is the probe's name (or its kind when unnamed),
    ``kind`` the probe's kind, ``target`` what it looked at (a URL, a path, a command)."""

    finding: str
    probe: str
    agent: str | None = None
    details: str = ""
    kind: str = ""
    target: str = ""

    @classmethod
    def from_result(cls, result: ProbeResult, agent: str | None = None) -> Finding | None:
        """The finding of a failed probe result; None for a pass."""
        if result.finding is None:
            return None
        return cls(finding=result.finding, probe=result.name, agent=agent, details=result.reason, kind=result.kind, target=result.target)


class Response(msgspec.Struct, frozen=True, kw_only=True):
    """What to do, decided by a rule.  ``reason`` names the rule that decided it."""

    action: str  # one of RESPONSE_ACTIONS
    params: dict[str, Any]  # cmd / path / max+attempt / task+agent / message
    reason: str
    finding: str  # the phrase as reported
    agent: str | None  # whom it concerns (None: no single agent)
    probes: tuple[str, ...]  # the probes whose findings triggered it, first seen first
    at: float  # the ``now`` it was decided at
    rule: str = ""  # the deciding rule's origin
    members: tuple[tuple[str | None, str], ...] = ()  # (agent, probe) of each finding answered


def _default(number: int, summary: str, **fields: Any) -> Rule:
    return Rule(origin=f"default rule {number} ({summary})", **fields)


# The seed table: each row has a producer in Lockstep and a test that fires it end to end.
# Comments say why each response and not another.
DEFAULT_RULES: tuple[Rule, ...] = (
    # Two endpoints down together (in one check batch or scheduled cycle) is the service,
    # not one flaky route: restart it (the [[probe]]'s ``restart`` command).
    _default(1, "two or more endpoints failing -> restart",
             finding=ENDPOINT_FAILING, min_failing=2, response="restart"),
    # A build that produced no new artifact leaves the tree in a state nobody tested.
    _default(2, "build produced nothing -> rollback",
             finding=BUILD_PRODUCED_NOTHING, response="rollback"),
    # Lost writes are usually oversized edits; retrying the same way fails the same way.
    _default(3, "write lost -> retry in smaller chunks",
             finding=WRITE_LOST, response="retry", max=DEFAULT_RETRY_MAX,
             message="retry in smaller chunks"),
    # Nothing is dropped silently.
    _default(4, "any other finding -> notify", finding=ANY_FINDING, response="notify"),
)


class Standing(msgspec.Struct, frozen=True):
    """A finding a rule has answered and that has not cleared since: the rule does not
    answer it again until the probe passes (then it is resolved)."""

    rule: str  # the rule's origin
    action: str
    agent: str | None
    finding: str  # normalized phrase
    probe: str
    at: float


class RetryCount(msgspec.Struct, frozen=True):
    agent: str | None
    finding: str  # normalized phrase
    count: int
    last_at: float


class RepairState(msgspec.Struct, frozen=True):
    """Retries answered so far, per (agent, finding).  Immutable; sorted for equality."""

    retries: tuple[RetryCount, ...] = ()
    standing: tuple[Standing, ...] = ()

    def stands(self, rule: str, agent: str | None, finding: str, probe: str) -> bool:
        phrase = normalize_finding(finding)
        return any((s.rule, s.agent, s.finding, s.probe) == (rule, agent, phrase, probe) for s in self.standing)

    def with_standing(self, entries: Sequence[Standing]) -> RepairState:
        keys = {(e.rule, e.agent, e.finding, e.probe) for e in entries}
        kept = [s for s in self.standing if (s.rule, s.agent, s.finding, s.probe) not in keys]
        return msgspec.structs.replace(self, standing=(*kept, *entries))

    def standing_for(self, agent: str | None, probe: str) -> list[Standing]:
        """What a pass of ``probe`` (for ``agent``) resolves."""
        return [s for s in self.standing if s.agent == agent and s.probe == probe]

    def resolved(self, agent: str | None, probe: str) -> RepairState:
        kept = tuple(s for s in self.standing if not (s.agent == agent and s.probe == probe))
        return msgspec.structs.replace(self, standing=kept)

    def retries_for(self, agent: str | None, finding: str) -> int:
        key = (agent, normalize_finding(finding))
        for entry in self.retries:
            if (entry.agent, entry.finding) == key:
                return entry.count
        return 0

    def with_retry(self, agent: str | None, finding: str, now: float) -> RepairState:
        """One more retry counted for (agent, finding)."""
        phrase = normalize_finding(finding)
        count = self.retries_for(agent, phrase) + 1
        kept = [e for e in self.retries if (e.agent, e.finding) != (agent, phrase)]
        kept.append(RetryCount(agent, phrase, count, now))
        return msgspec.structs.replace(self, retries=tuple(sorted(kept, key=_retry_key)))

    def cleared(self, agent: str | None, finding: str | None = None) -> RepairState:
        """Counters reset for ``agent`` (one finding, or all): the problem was fixed."""
        phrase = None if finding is None else normalize_finding(finding)
        kept = tuple(
            e for e in self.retries
            if not (e.agent == agent and (phrase is None or e.finding == phrase))
        )
        return msgspec.structs.replace(self, retries=kept)


def _retry_key(entry: RetryCount) -> tuple[str, str]:
    return (entry.agent or "", entry.finding)


class RuleTable:
    """Config rules then defaults; ``decide`` maps a batch of findings to responses."""

    def __init__(self, rules: Sequence[Rule] = (), *, defaults: Sequence[Rule] = DEFAULT_RULES):
        for rule in (*rules, *defaults):
            if rule.response not in RESPONSE_ACTIONS:
                raise LocalError(f"rule {rule.origin!r} has unknown response {rule.response!r}")
        self.rules: tuple[Rule, ...] = (*rules, *defaults)

    @classmethod
    def from_config(cls, config: Config) -> RuleTable:
        return cls(config.rules)

    @property
    def window(self) -> float:
        """The longest ``within`` of any rule: how long earlier findings matter (0: none)."""
        return max((rule.within or 0.0 for rule in self.rules), default=0.0)

    def match(self, finding: Finding, batch: Sequence[Finding] = ()) -> Rule | None:
        """The first rule matching ``finding`` within ``batch`` (``finding`` counts too)."""
        index = self._match_index(finding, (*batch, finding))
        return None if index is None else self.rules[index]

    def _match_index(
        self, finding: Finding, batch: Sequence[Finding], recent: Sequence[tuple[float, Finding]] = (), now: float = 0.0
    ) -> int | None:
        for index, rule in enumerate(self.rules):
            if not _rule_accepts(rule, finding):
                continue
            if rule.min_failing > 1 and len(_counted(rule, batch, recent, now)) < rule.min_failing:
                continue
            return index
        return None

    def decide(
        self,
        findings: Sequence[Finding],
        state: RepairState,
        now: float,
        recent: Sequence[tuple[float, Finding]] = (),
    ) -> tuple[list[Response], RepairState]:
        """Responses for one batch of findings, and the repair state after them.

        ``recent``: findings of earlier batches with the ``now`` they were judged at; a
        rule with ``within`` counts those at most that old towards ``min_failing``.  A
        finding a rule answered before and that has not cleared since (``standing``)
        gets no second answer (a retry stands only once escalated: until then its own
        bound counts the attempts)."""
        groups: dict[tuple[Any, ...], list[Finding]] = {}
        group_rule: dict[tuple[Any, ...], Rule] = {}
        for finding in findings:
            index = self._match_index(finding, findings, recent, now)
            if index is None:  # only with a table built without the catch-all default
                continue
            rule = self.rules[index]
            if rule.min_failing > 1:
                key: tuple[Any, ...] = (index,)
            else:
                key = (index, finding.agent, normalize_finding(finding.finding))
            groups.setdefault(key, []).append(finding)
            group_rule[key] = rule
        responses = []
        for key, members in groups.items():
            rule = group_rule[key]
            fresh = [f for f in members if not state.stands(rule.origin, f.agent, f.finding, f.probe)]
            if not fresh:
                continue  # answered already, and not cleared since (a retry stands once escalated)
            if rule.min_failing > 1:  # the group: this batch's and the window's
                counted = _counted(rule, findings, recent, now)
                members = list({(f.agent, f.probe): f for f in counted}.values())
            else:
                members = fresh
            response, state = _respond(rule, members, state, now)
            responses.append(response)
        return responses, state


def decide(
    findings: Sequence[Finding],
    state: RepairState,
    now: float,
    table: RuleTable | None = None,
) -> tuple[list[Response], RepairState]:
    """``RuleTable.decide`` with the default table unless ``table`` is given."""
    return (table or _DEFAULT_TABLE).decide(findings, state, now)


def _rule_accepts(rule: Rule, finding: Finding) -> bool:
    """Phrase, probe, kind, target and text filters; ``min_failing`` is a property of
    the batch (and the window), not checked here."""
    phrase = normalize_finding(rule.finding)
    if phrase != ANY_FINDING and phrase != normalize_finding(finding.finding):
        return False
    if rule.probe is not None and rule.probe != finding.probe:
        return False
    if rule.kind is not None and rule.kind != finding.kind:
        return False
    if rule.target is not None and not fnmatch.fnmatchcase(finding.target, rule.target):
        return False
    return rule.contains is None or rule.contains.lower() in finding.details.lower()


def _counted(rule: Rule, batch: Sequence[Finding], recent: Sequence[tuple[float, Finding]], now: float) -> list[Finding]:
    """The findings ``rule`` counts towards ``min_failing``: the batch's and, with
    ``within``, earlier ones that recent; the newest of each (agent, probe)."""
    found: dict[str, Finding] = {}
    if rule.within is not None:
        for at, finding in recent:
            if now - at <= rule.within and _rule_accepts(rule, finding):
                found[finding.probe] = finding
    for finding in batch:
        if _rule_accepts(rule, finding):
            found[finding.probe] = finding
    return list(found.values())


def _describe_rule(rule: Rule) -> str:
    parts = [f"finding {rule.finding!r}"]
    if rule.probe is not None:
        parts.append(f"probe {rule.probe!r}")
    if rule.kind is not None:
        parts.append(f"kind {rule.kind!r}")
    if rule.target is not None:
        parts.append(f"target {rule.target!r}")
    if rule.contains is not None:
        parts.append(f"reason containing {rule.contains!r}")
    if rule.min_failing > 1:
        parts.append(f"at least {rule.min_failing} probes failing" + (f" within {rule.within:g}s" if rule.within else ""))
    return f"{rule.origin}: {', '.join(parts)} -> {rule.response}"


def _respond(
    rule: Rule, members: list[Finding], state: RepairState, now: float
) -> tuple[Response, RepairState]:
    first = members[0]
    agents = {f.agent for f in members}
    agent = first.agent if len(agents) == 1 else None
    probes = tuple(dict.fromkeys(f.probe for f in members))
    reason = _describe_rule(rule)
    params: dict[str, Any] = {}
    action = rule.response
    if action in ("rollback", "restart") and rule.cmd is not None:
        params["cmd"] = rule.cmd
    elif action == "touch":
        params["path"] = rule.path
    elif action == "queue_task":
        params["task"] = rule.task
        params["agent"] = rule.agent if rule.agent is not None else first.agent
    elif action == "retry":
        bound = rule.max if rule.max is not None else DEFAULT_RETRY_MAX
        done = state.retries_for(agent, first.finding)
        if done >= bound:
            # Escalate instead of looping: a person decides what the rule could not.
            action = "notify"
            reason = f"retry bound reached ({done} of {bound} retries); {reason}"
            params["message"] = (
                f"{first.finding!r} persists after {done} retries"
                + (f" for agent {agent!r}" if agent else "")
            )
        else:
            params["max"] = bound
            params["attempt"] = done + 1
            state = state.with_retry(agent, first.finding, now)
    if rule.message is not None and "message" not in params:
        params["message"] = rule.message
    if action != "retry":  # answered: not again until it clears (RepairState.standing)
        state = state.with_standing([Standing(rule.origin, action, f.agent, normalize_finding(f.finding), f.probe, now) for f in members])
    response = Response(
        action=action,
        params=params,
        reason=reason,
        finding=first.finding,
        agent=agent,
        probes=probes,
        at=now,
        rule=rule.origin,
        members=tuple((f.agent, f.probe) for f in members),
    )
    return response, state


_DEFAULT_TABLE = RuleTable()
