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

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from probes.config import (
    DEFAULT_RETRY_MAX,
    DEPLOY_HASH_MISMATCH,
    EVALUATION_FAILED,
    RESPONSE_ACTIONS,
    Config,
    Rule,
)
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
    """What a probe saw.  ``probe`` is the probe's name (or its kind when unnamed)."""

    finding: str
    probe: str
    agent: str | None = None
    details: str = ""

    @classmethod
    def from_result(cls, result: ProbeResult, agent: str | None = None) -> Finding | None:
        """The finding of a failed probe result; None for a pass."""
        if result.finding is None:
            return None
        return cls(finding=result.finding, probe=result.name, agent=agent, details=result.reason)


class Response(msgspec.Struct, frozen=True, kw_only=True):
    """What to do, decided by a rule.  ``reason`` names the rule that decided it."""

    action: str  # one of RESPONSE_ACTIONS
    params: dict[str, Any]  # cmd / path / max+attempt / task+agent / message
    reason: str
    finding: str  # the phrase as reported
    agent: str | None  # whom it concerns (None: no single agent)
    probes: tuple[str, ...]  # the probes whose findings triggered it, first seen first
    at: float  # the ``now`` it was decided at


def _default(number: int, summary: str, **fields: Any) -> Rule:
    return Rule(origin=f"default rule {number} ({summary})", **fields)


# The seed table.  Comments say why each response and not another.
DEFAULT_RULES: tuple[Rule, ...] = (
    # Two endpoints down at once is the service, not one flaky route: restart it.
    _default(1, "two or more endpoints failing -> restart",
             finding=ENDPOINT_FAILING, min_failing=2, response="restart"),
    # The deploy reports a bundle hash the disk does not have: re-touch the entry point so
    # the server picks up the file on disk again.
    _default(2, "deploy info differs from disk -> touch index.html",
             finding=DEPLOY_HASH_MISMATCH, response="touch", path="index.html"),
    # A build that produced no new artifact leaves the tree in a state nobody tested.
    _default(3, "build produced nothing -> rollback",
             finding=BUILD_PRODUCED_NOTHING, response="rollback"),
    # Lost writes are usually oversized edits; retrying the same way fails the same way.
    _default(4, "write lost -> retry in smaller chunks",
             finding=WRITE_LOST, response="retry", max=DEFAULT_RETRY_MAX,
             message="retry in smaller chunks"),
    # A failed evaluation is a verdict on the work, not a sick process: restarting would
    # hide it.  A person must see it.
    _default(5, "evaluation failed -> notify, never restart",
             finding=EVALUATION_FAILED, response="notify",
             message="an evaluation failed; review the result before continuing"),
    # Nothing is dropped silently.
    _default(6, "any other finding -> notify", finding=ANY_FINDING, response="notify"),
)


class RetryCount(msgspec.Struct, frozen=True):
    agent: str | None
    finding: str  # normalized phrase
    count: int
    last_at: float


class RepairState(msgspec.Struct, frozen=True):
    """Retries answered so far, per (agent, finding).  Immutable; sorted for equality."""

    retries: tuple[RetryCount, ...] = ()

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
        return RepairState(tuple(sorted(kept, key=_retry_key)))

    def cleared(self, agent: str | None, finding: str | None = None) -> RepairState:
        """Counters reset for ``agent`` (one finding, or all): the problem was fixed."""
        phrase = None if finding is None else normalize_finding(finding)
        kept = tuple(
            e for e in self.retries
            if not (e.agent == agent and (phrase is None or e.finding == phrase))
        )
        return RepairState(kept)


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

    def match(self, finding: Finding, batch: Sequence[Finding] = ()) -> Rule | None:
        """The first rule matching ``finding`` within ``batch`` (``finding`` counts too)."""
        index = self._match_index(finding, (*batch, finding))
        return None if index is None else self.rules[index]

    def _match_index(self, finding: Finding, batch: Sequence[Finding]) -> int | None:
        for index, rule in enumerate(self.rules):
            if not _rule_accepts(rule, finding):
                continue
            if rule.min_failing > 1:
                failing_probes = {f.probe for f in batch if _rule_accepts(rule, f)}
                if len(failing_probes) < rule.min_failing:
                    continue
            return index
        return None

    def decide(
        self, findings: Sequence[Finding], state: RepairState, now: float
    ) -> tuple[list[Response], RepairState]:
        """Responses for one batch of findings, and the repair state after them."""
        groups: dict[tuple[Any, ...], list[Finding]] = {}
        group_rule: dict[tuple[Any, ...], Rule] = {}
        for finding in findings:
            index = self._match_index(finding, findings)
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
            response, state = _respond(group_rule[key], members, state, now)
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
    """Phrase and probe filter; ``min_failing`` is a property of the batch, not checked here."""
    phrase = normalize_finding(rule.finding)
    if phrase != ANY_FINDING and phrase != normalize_finding(finding.finding):
        return False
    return rule.probe is None or rule.probe == finding.probe


def _describe_rule(rule: Rule) -> str:
    parts = [f"finding {rule.finding!r}"]
    if rule.probe is not None:
        parts.append(f"probe {rule.probe!r}")
    if rule.min_failing > 1:
        parts.append(f"at least {rule.min_failing} probes failing")
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
    response = Response(
        action=action,
        params=params,
        reason=reason,
        finding=first.finding,
        agent=agent,
        probes=probes,
        at=now,
    )
    return response, state


_DEFAULT_TABLE = RuleTable()
