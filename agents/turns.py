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

Failures never trap the model: no coordinator, or a wait longer than the hook's time,
lets the turn end with a visible ``systemMessage``; under ``--fail-closed`` a failure
blocks the stop, except when the client says the stop hook is already looping
(``stop_hook_active``).
"""

from __future__ import annotations

import json
import os
import time

TURN_STARTS = {"claude": {"UserPromptSubmit"}, "codex": {"UserPromptSubmit"}, "gemini": {"BeforeAgent"}}
TURN_ENDS = {"claude": {"Stop", "SubagentStop"}, "codex": {"Stop", "SubagentStop"}, "gemini": {"AfterAgent"}}
REASON_LIMIT = 6000  # characters of failure report a blocked stop hands the model
OUTPUT_LIMIT = 2500  # of one check's output within it
POLL_INTERVAL = 0.2


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


def _content(cwd: str) -> tuple[str, str]:
    """(worktree, content id) of the worktree holding ``cwd``."""
    from protocol.content import content_id
    from protocol.discovery import locate

    worktree = str(locate(cwd).worktree)
    return worktree, content_id(worktree)


def turn_start(agent: str, event: dict, endpoint: str | None) -> str:
    from agents.oneshot import open_oneshot
    from protocol import messages as m

    cwd = str(event.get("cwd") or os.getcwd())
    _, tree = _content(cwd)
    with open_oneshot(agent, cwd=cwd, endpoint=endpoint) as session:
        session.call(lambda s: m.TurnStart(session=s, tree=tree))
    return "{}"


def turn_end(client: str, agent: str, event: dict, endpoint: str | None) -> str:
    from agents.oneshot import expect, open_oneshot
    from protocol import messages as m

    cwd = str(event.get("cwd") or os.getcwd())
    worktree, tree = _content(cwd)
    venv = os.environ.get("VIRTUAL_ENV", "")
    with open_oneshot(agent, cwd=cwd, endpoint=endpoint) as session:
        reply = session.call(lambda s: m.Verify(cwd=worktree, session=s, tree=tree, turn_end=True, venv=venv))
        if isinstance(reply, m.Gate):
            gate = reply
        else:
            accepted = expect(reply, m.Accepted)
            gate = _wait(session.conn, accepted.job)
            if gate is None:
                return let_end(f"lockstep: verify run {accepted.job} is still running after {wait_limit():g}s; this turn ends unchecked")
    if gate.subject == "stop":  # decided without a run: quiet, unless the turn ends failing
        return let_end(f"lockstep: {gate.reason}" if gate.verdict == "escalate" else "")
    if gate.verdict == "pass":
        return let_end()
    return block(client, failure_report(gate))


def _wait(conn, job: str):
    """The gate of ``job`` once it finishes, or None after ``wait_limit()``."""
    from agents.oneshot import expect
    from protocol import messages as m

    deadline = time.monotonic() + wait_limit()
    while time.monotonic() < deadline:
        reply = expect(conn.request(m.JobQuery(job=job)), m.JobReply)
        if reply.gate is not None:
            return reply.gate
        time.sleep(POLL_INTERVAL)  # polling the job's state, bounded by the deadline
    return None


def failure_report(gate) -> str:
    """What a blocked stop tells the model: the failing checks first, each with its
    errors-first output, within ``REASON_LIMIT`` characters."""
    failing = [r for r in gate.results if r.get("verdict") != "pass"]
    lines = [
        f"lockstep: verify fails on your worktree (job {gate.job}): {len(failing)} of {len(gate.results)} checks failed. "
        "Fix them before ending your turn; this stop is blocked until verify passes "
        "(or the repair-loop bound, max_repair_loops, is reached)."
    ]
    if not failing:
        lines.append(gate.reason)
    for result in failing:
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
    for result in gate.results:
        if result.get("verdict") == "pass":
            lines.append(f"── {result.get('name', '?')}: passed")
    report = "\n".join(lines)
    if len(report) > REASON_LIMIT:
        more = f"\n… cut; `lockstep verify --full {gate.job}` prints every check's whole output"
        report = report[: REASON_LIMIT - len(more)] + more
    return report
