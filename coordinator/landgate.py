"""The turn-end gate under ``[land] required``: a turn ends landed, or told why not.

Pure: reads the registry and the integration index, returns what to do; the core acts
(``Core._land_gate``) and the Stop hook follows a landing it is handed
(``agents/turns.py``).

Theory
------
With ``[land] required = true`` a turn's work counts once it is on the integration
branch, so at a stop the gate asks for a landing where the verify gate asks for a
passing run (the landing runs the checks too, on the merged tree: what matters).  A
landing takes commits, not files; and what the agent was told once it need not be told
again.  In order:

1. **Uncommitted content** (the worktree's content id is not its ``HEAD``'s tree:
   changed tracked files, or untracked ones git does not ignore): the stop is blocked,
   asking for a commit.  Said once per content in a turn: stopping again on the same
   content ends the turn, not landed (the agent may have good reasons; the user sees
   why in a ``systemMessage``).
2. **Landed**: a ``land.landed`` of that very commit, or the commit is the integration
   tip: the turn ends.
3. **Refused and reported**: a landing of that commit was refused this turn (a stop
   blocked with the refusal, or the agent's own ``lockstep land`` printed it): the turn
   ends, not landed.  A conflict only another agent can resolve must not trap the
   model in a loop; a new commit is landed afresh.
4. **Under way**: the agent's landing of that commit is queued or running: the hook
   waits for it.
5. Else a landing is queued; the hook follows it: landed ends the turn; a refusal
   blocks the stop with it (the conflicting files, hunks and the other agent, or the
   failing checks errors-first), which the model reads as its next instruction.

``[verify] turn_gate = false`` turns this gate off too.  Where nothing can land - no git
repository, a detached ``HEAD``, an agent working on the integration branch itself - the
verify gate decides, as without ``[land]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol import messages as m

from .integration import IntegrationIndex
from .registry import Registry


@dataclass(frozen=True)
class StopAction:
    """``decide`` (answer ``verdict``/``reason`` now), ``join`` (follow landing ``job``),
    ``land`` (queue a landing of the agent's head), ``verify`` (the verify gate decides)."""

    action: str
    verdict: str = ""
    reason: str = ""
    job: str = ""


VERIFY = StopAction("verify")


def land_stop(reg: Registry, index: IntegrationIndex | None, agent: str, msg: m.Verify) -> StopAction:
    """What the turn-end gate does for ``agent``'s stop (the module docstring's order)."""
    if index is None or not msg.branch or not msg.head:
        return VERIFY
    branch = msg.branch if msg.branch.startswith("refs/") else f"refs/heads/{msg.branch}"
    if branch == index.branch:
        return VERIFY
    short, target, head = branch.removeprefix("refs/heads/"), index.short_name, msg.head
    if msg.tree and msg.head_tree and msg.tree != msg.head_tree:
        if reg.reported(agent, f"tree {msg.tree}") is not None:
            return StopAction(
                "decide", "escalate",
                f"the turn ends with uncommitted changes in {short}, not landed on {target} ([land] required; "
                "the agent was asked to commit them and stopped again on the same content)",
            )
        return StopAction(
            "decide", "block",
            f"[land] required: your turn ends once your work has landed on {target}, and a landing takes commits: "
            f"your worktree has uncommitted changes. Commit what belongs to this work on {short} "
            f"(`git add -A && git commit -m ...`; discard or stash the rest), then end your turn again: "
            f"the stop lands {short} through the merge queue (`lockstep land`).",
        )
    if head == index.tip or head in reg.landed_heads:
        commit = reg.landed_heads.get(head, head)
        return StopAction("decide", "allow", f"{short} at {head[:10]} is on {target} (as {commit[:10]}): landed")
    refused = reg.reported(agent, f"refused {head}")
    if refused is not None:
        return StopAction(
            "decide", "escalate",
            f"the turn ends with {short} at {head[:10]} not landed on {target}: its landing was refused "
            f"and the refusal reported to the agent ({refused})",
        )
    job = reg.open_landing(agent, head)
    if job is not None:
        return StopAction("join", job=job)
    return StopAction("land")
