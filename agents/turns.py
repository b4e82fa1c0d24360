"""The turn-end gate: an agent's turn ends only on content that passes verify.

The coding clients tell a hook when a turn starts and when the agent is about to stop
(payloads in tests/fixtures/hooks, sources in its README):

==========  ===========================  ===============================  =====================
client      a turn starts                the agent is about to stop       block the stop with
==========  ===========================  ===============================  =====================
claude      ``UserPromptSubmit``         ``Stop``, ``SubagentStop``       ``{"decision": "block", "reason"}``
codex       ``UserPromptSubmit``         ``Stop``, ``SubagentStop``       ``{"decision": "block", "reason"}``
gemini      ``BeforeAgent``              ``AfterAgent``                   ``{"decision": "deny", "reason"}``
==========  ===========================  ===============================  =====================

At a turn's start the hook sends ``turn`` with the worktree's content id
(``protocol.content``): the repair-loop count starts again, and a turn that ends on the
same content needs no verify.  At its end it sends ``verify`` with ``turn_end`` and the
content id; the coordinator (``Gates.stop_gate``) answers at once when the content
already passed, nothing changed this turn, the gate is off, or the agent has used its
``max_repair_loops`` failing rounds this turn (verdict ``escalate``: the failure report
is a ``stop.decided`` ledger event, shown to the user, and the turn ends); otherwise it starts a verify run, or
points at the agent's run already under way, and the hook waits for it.  A failing run
blocks the stop: the reason - the failing checks first, each with its errors-first
output, cut to ``REASON_LIMIT`` characters - is what the model reads next.

Under ``[land] required`` the coordinator (``coordinator/landgate.py``) asks for a
landing instead: the hook also sends the worktree's branch, commit and commit tree; a
stop on uncommitted changes is blocked once, asking for a commit; otherwise the
coordinator queues a landing of the branch (or points at the one under way) and the
hook follows it: ``landed`` ends the turn, a refusal blocks the stop with what the
model must fix (``landing_report``: the conflicting files and hunks with the commits and
agents they meet, or the failing checks errors-first).  A refusal or uncommitted state
already reported in this turn lets the turn end, shown to the user.

Failures never trap the model: no coordinator, or a wait longer than the hook's time,
lets the turn end with a visible ``systemMessage``; under ``--fail-closed`` a failure
blocks the stop, except when the client says the stop hook is already looping
(``stop_hook_active``).
"""

from __future__ import annotations

import json
import os
import time

from agents.polling import Backoff

TURN_STARTS = {"claude": {"UserPromptSubmit"}, "codex": {"UserPromptSubmit"}, "gemini": {"BeforeAgent"}}
TURN_ENDS = {"claude": {"Stop", "SubagentStop"}, "codex": {"Stop", "SubagentStop"}, "gemini": {"AfterAgent"}}
REASON_LIMIT = 6000  # characters of failure report a blocked stop hands the model
OUTPUT_LIMIT = 2500  # of one check's output within it
UNCOMMITTED_SHOWN = 20  # files a stop blocked on uncommitted changes lists


def wait_limit() -> float:
    """Seconds a Stop hook waits for a verify run (``LOCKSTEP_STOP_WAIT``, default 570:
    under the 600 s ``hook install`` gives the Stop hooks)."""
    try:
        value = float(os.environ.get("LOCKSTEP_STOP_WAIT", "570"))
    except ValueError:
        return 570.0
    return value if value > 0 else 570.0


# Each answer is the JSON the hook prints; the hook always exits 0 (agents/toolwrites.py).


def block(client: str, reason: str) -> str:
    """Keep the agent working: the reason is its next instruction."""
    return json.dumps({"decision": "deny" if client == "gemini" else "block", "reason": reason})


def let_end(message: str = "") -> str:
    return json.dumps({"systemMessage": message}) if message else "{}"


def _content(cwd: str) -> tuple[str, str] | None:
    """(worktree, content id) of the worktree holding ``cwd``; None outside any git
    repository (a client there has no turn to track and nothing to verify)."""
    from protocol.content import content_id
    from protocol.discovery import locate

    place = locate(cwd)
    if not place.in_git:
        return None
    worktree = str(place.worktree)
    return worktree, content_id(worktree)


def _commit_of(worktree: str) -> tuple[str, str, str]:
    """(branch ref, its commit, the commit's tree) checked out in ``worktree``; ""
    for what is unknown (a detached HEAD has no branch)."""
    from protocol.content import head_tree
    from protocol.gitrefs import head_branch, read_head

    return head_branch(worktree) or "", read_head(worktree) or "", head_tree(worktree)


def turn_start(agent: str, event: dict, endpoint: str | None, client: str = "claude") -> str:
    """Tell the coordinator a turn starts; the answer puts the agent's messages and
    tasks not shown yet in the model's context (agents/inbox.py)."""
    from agents.inbox import fetch, with_context
    from agents.oneshot import open_oneshot
    from protocol import messages as m

    cwd = str(event.get("cwd") or os.getcwd())
    content = _content(cwd)
    if content is None:
        return "{}"
    _, tree = content
    event_name = str(event.get("hook_event_name") or "UserPromptSubmit")
    with open_oneshot(agent, cwd=cwd, endpoint=endpoint) as session:
        session.call(lambda s: m.TurnStart(session=s, tree=tree))
        context = fetch(session, event_name)
    return json.dumps(with_context({}, event_name, context)) if context else "{}"


def turn_end(client: str, agent: str, event: dict, endpoint: str | None) -> str:
    from agents.oneshot import expect, open_oneshot
    from protocol import messages as m

    cwd = str(event.get("cwd") or os.getcwd())
    content = _content(cwd)
    if content is None:
        return let_end()
    worktree, tree = content
    branch, head, committed = _commit_of(worktree)
    venv = os.environ.get("VIRTUAL_ENV", "")
    with open_oneshot(agent, cwd=cwd, endpoint=endpoint) as session:
        reply = session.call(
            lambda s: m.Verify(cwd=worktree, session=s, tree=tree, turn_end=True, venv=venv, branch=branch, head=head, head_tree=committed)
        )
        if isinstance(reply, m.Gate):
            gate = reply
        elif expect(reply, m.Accepted).kind == "land":  # [land] required: the stop lands the branch
            landing = _wait_landing(session.conn, reply.job)
            if landing is None:
                return let_end(f"lockstep: landing {reply.job} is not decided after {wait_limit():g}s; this turn ends not landed yet")
            if landing.verdict == "landed":
                return let_end(f"lockstep: {landing.reason}")
            return block(client, landing_report(landing))
        else:
            gate = _wait(session.conn, reply.job)
            if gate is None:
                return let_end(f"lockstep: verify run {reply.job} is still running after {wait_limit():g}s; this turn ends unchecked")
    if gate.subject == "stop":  # decided without a run: quiet, unless the turn ends failing or must commit
        if gate.verdict == "block":
            return block(client, f"lockstep: {gate.reason}" + _uncommitted(worktree))
        return let_end(f"lockstep: {gate.reason}" if gate.verdict == "escalate" else "")
    if gate.verdict == "pass":
        return let_end()
    return block(client, failure_report(gate))


def _wait(conn, job: str):
    """The gate of ``job`` once it finishes, or None after ``wait_limit()``."""
    from agents.oneshot import expect
    from protocol import messages as m

    deadline = time.monotonic() + wait_limit()
    backoff = Backoff()
    while time.monotonic() < deadline:
        reply = expect(conn.request(m.JobQuery(job=job)), m.JobReply)
        if reply.gate is not None:
            return reply.gate
        backoff.pause()  # polling the job's state, bounded by the deadline
    return None


def _wait_landing(conn, job: str):
    """Landing ``job`` once decided, or None after ``wait_limit()``."""
    from agents.oneshot import expect
    from protocol import messages as m

    deadline = time.monotonic() + wait_limit()
    backoff = Backoff()
    while time.monotonic() < deadline:
        landing = expect(conn.request(m.LandQuery(job=job)), m.Landing)
        if landing.stage == "finished":
            return landing
        backoff.pause()  # polling the landing's state, bounded by the deadline
    return None


def _uncommitted(worktree: str) -> str:
    """The files ``git status`` shows, for the model to commit (best effort)."""
    import subprocess

    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=worktree, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = done.stdout.splitlines() if done.returncode == 0 else []
    shown = "\n".join(f"  {line}" for line in lines[:UNCOMMITTED_SHOWN])
    more = f"\n  … and {len(lines) - UNCOMMITTED_SHOWN} more" if len(lines) > UNCOMMITTED_SHOWN else ""
    return f"\nUncommitted (git status --porcelain):\n{shown}{more}" if lines else ""


def landing_report(landing) -> str:
    """What a stop blocked by a refused landing tells the model: the verdict and what
    to fix - each conflicting file with its hunks and the integration commits (and
    agents) it meets, or the failing checks first, errors-first - within
    ``REASON_LIMIT`` characters."""
    lines = [
        f"lockstep: [land] required: your turn ends once {landing.branch} has landed on {landing.target}. "
        f"Its landing (job {landing.job}) was refused: {landing.verdict}. {landing.reason}"
    ]
    for conflict in landing.conflicts:
        lines.append(f"── {conflict.path} ({conflict.kind})")
        for hunk in conflict.hunks:
            lines.append(f"   line {hunk.get('line')}:")
            lines.extend(f"   {landing.target}| {line}" for line in hunk.get("ours", []))
            lines.extend(f"   {landing.branch}| {line}" for line in hunk.get("theirs", []))
        for commit in conflict.commits:
            who = commit.author + (f" (agent {commit.agent})" if commit.agent and commit.agent != commit.author else "")
            lines.append(f"   changed on {landing.target} in {commit.commit[:10]} by {who}: {commit.subject}")
    lines.extend(_results_lines(landing.results))
    lines.append(
        "Fix it on your branch and commit, then end your turn again: the stop lands the new commit. "
        "Stopping again on this same commit ends the turn with it not landed."
    )
    return _cut("\n".join(lines), f"`lockstep land --json` on {landing.branch} prints the whole refusal")


def _results_lines(results: list[dict]) -> list[str]:
    """Checks as a report lists them: the failing ones first, each with its errors-first
    output, then one line per passing one."""
    lines = []
    for result in results:
        if result.get("verdict") == "pass":
            continue
        head = f"── {result.get('name', '?')}: {result.get('finding') or 'failed'}"
        if result.get("exit_code") is not None:
            head += f" (exit {result['exit_code']})"
        if result.get("reason"):
            head += f" - {result['reason']}"
        lines.append(head)
        output = (result.get("output") or "").rstrip()
        if output:
            if len(output) > OUTPUT_LIMIT:
                output = output[:OUTPUT_LIMIT] + f"\n… ({len(output) - OUTPUT_LIMIT} more characters)"
            lines.append(output)
    for result in results:
        if result.get("verdict") == "pass":
            lines.append(f"── {result.get('name', '?')}: passed")
    return lines


def _cut(report: str, where: str) -> str:
    if len(report) > REASON_LIMIT:
        more = f"\n… cut; {where}"
        report = report[: REASON_LIMIT - len(more)] + more
    return report


def failure_report(gate) -> str:
    """What a blocked stop tells the model: the failing checks first, each with its
    errors-first output, within ``REASON_LIMIT`` characters."""
    failing = [r for r in gate.results if r.get("verdict") != "pass"]
    blocked = ("this stop is blocked until verify passes "
               "(or the repair-loop bound, max_repair_loops, is reached).")
    if not gate.results:  # no check ran (lockstep.toml does not parse, no checks): "0 of 0 checks failed" said nothing
        lines = [f"lockstep: verify could not run on your worktree (job {gate.job}): {gate.reason}", f"Fix that before ending your turn; {blocked}"]
        return _cut("\n".join(lines), f"`lockstep verify --full {gate.job}` says more")
    lines = [
        f"lockstep: verify fails on your worktree (job {gate.job}): {len(failing)} of {len(gate.results)} checks failed. "
        f"Fix them before ending your turn; {blocked}"
    ]
    if not failing:
        lines.append(gate.reason)
    lines.extend(_results_lines(gate.results))
    return _cut("\n".join(lines), f"`lockstep verify --full {gate.job}` prints every check's whole output")
