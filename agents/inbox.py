"""What an agent's hooks put in the model's context: its messages and tasks.

The coordinator keeps them (coordinator/inbox.py); a hook asks for those not shown yet
(``inbox``) at a turn's start, and before a write when the intent's ``decision`` says
some wait.  This module renders them as the lines the model reads; it imports nothing
but the wire types, since it runs inside the per-edit hook.
"""

from __future__ import annotations

from protocol import messages as m


def render(reply: m.InboxReply) -> str:
    """The lines a model reads ("" when there is nothing)."""
    lines = []
    for message in reply.messages:
        sender = message.sender or "the operator"
        lines.append(f"lockstep: message {message.id} from {sender}: {message.text}")
    for task in reply.tasks:
        why = f" (because: {task.because})" if task.because else ""
        if task.state == "queued":
            how = f"take it with `lockstep tasks take {task.id}`, then `lockstep tasks done {task.id}` when it is done"
        else:
            how = f"{task.state} by {task.by}" if task.by else task.state
        lines.append(f"lockstep: task {task.id} for you: {task.task}{why}; {how}")
    return "\n".join(lines)


def fetch(session, via: str) -> str:
    """Ask for what waits for the session's agent (marking it shown); its lines."""
    from agents.oneshot import expect

    reply = expect(session.call(lambda s: m.InboxQuery(session=s, via=via)), m.InboxReply)
    return render(reply)


def with_context(document: dict, event_name: str, context: str) -> dict:
    """``document`` (a hook's JSON answer) with ``context`` added where the model reads it:
    ``hookSpecificOutput.additionalContext`` (appended to any there)."""
    if not context:
        return document
    specific = dict(document.get("hookSpecificOutput") or {})
    specific.setdefault("hookEventName", event_name)
    earlier = specific.get("additionalContext")
    specific["additionalContext"] = f"{earlier}\n{context}" if earlier else context
    return {**document, "hookSpecificOutput": specific}
