"""Claude Code hooks: ask the coordinator before an edit, verify the write after it.

Claude Code runs a hook command with the event as JSON on stdin
(``hook_event_name``, ``session_id``, ``cwd``, ``tool_name``, ``tool_input``, ...).

* ``PreToolUse`` on a file-writing tool (Write, Edit, MultiEdit, NotebookEdit): a write
  intent for the file.  ``block`` answers with ``permissionDecision: "deny"`` and the
  reason, which Claude Code shows to the model; ``allow``/``warn`` let the edit go on,
  a warning as JSON the client shows: ``systemMessage`` (the user) and
  ``hookSpecificOutput.additionalContext`` (the model).
* ``PostToolUse`` on ``Write``: the ``write`` verifier reads the file back and compares
  its hash with the content the tool was given; a mismatch ("write lost") exits 2 so the
  model sees the finding.

The agent is ``LOCKSTEP_AGENT`` (set by ``lockstep run``), else ``claude-`` and the
first characters of the Claude session id.  Every failure - no coordinator, an error
reply, an unexpected error - lets the edit through with that visible warning, or under
``--fail-closed`` denies it (``agents.toolwrites.failure``); the hook never exits 1,
which Claude Code takes as "go ahead" and shows nobody.

The hook runs before and after every edit, so this module and the calls it makes
(``write_intent``: the blocking one-shot client) import no event loop.
"""

from __future__ import annotations

import json
import os
from typing import Callable, NamedTuple

from agents.hookinput import HookInputError, cwd_problem, json_kind
from protocol import jsontext
from protocol.errors import LockstepError, PeerError

WRITING_TOOLS = {"Write", "Edit", "MultiEdit", "NotebookEdit"}


class HookOutcome(NamedTuple):  # not a dataclass: ``dataclasses`` slows every hook's start-up
    exit_code: int
    stdout: str = ""
    stderr: str = ""


def agent_for(event: dict) -> str:
    name = os.environ.get("LOCKSTEP_AGENT")
    if name:
        return name
    session = "".join(c for c in str(event.get("session_id", "")) if c.isascii() and c.isalnum())[:12]  # "é" is no part of an agent name
    return f"claude-{session or 'anonymous'}"


def tool_input(event: dict) -> dict:
    """The event's ``tool_input`` (``{}`` when absent); ``HookInputError`` when it is not an object."""
    found = event.get("tool_input")
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise HookInputError(f"hook input: tool_input is {json_kind(found)}, not an object")
    return found


def target_path(event: dict) -> str | None:
    """The file a writing tool names; ``HookInputError`` when it names one that is not a string."""
    given = tool_input(event)
    for key in ("file_path", "notebook_path"):
        path = given.get(key)
        if path is None or path == "":
            continue
        if not isinstance(path, str):
            raise HookInputError(f"hook input: tool_input.{key} is {json_kind(path)}, not a path")
        return path
    return None


def deny(reason: str) -> HookOutcome:
    decision = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}}
    return HookOutcome(0, stdout=json.dumps(decision))


def pre_tool_use(event: dict, decide) -> HookOutcome:
    """``decide(agent, path) -> (verdict, reason[, context])`` asks the coordinator;
    ``context``: the agent's messages and tasks not shown yet (agents/inbox.py), which
    go to the model with the answer."""
    if event.get("tool_name") not in WRITING_TOOLS:
        return HookOutcome(0)
    path = target_path(event)
    if not path:
        return HookOutcome(0)
    verdict, reason, *more = decide(agent_for(event), path)
    context = more[0] if more else ""
    if verdict == "block":
        return deny(f"lockstep: {reason}" + (f"\n{context}" if context else ""))
    document: dict = {}
    if verdict == "warn":  # the warning the client shows (systemMessage, and to the model)
        from agents.toolwrites import warn

        document = json.loads(warn("claude", f"lockstep: {reason}", "PreToolUse").stdout)
    if context:  # the inbox joins the same answer, after the warning's context
        from agents.inbox import with_context

        document = with_context(document, "PreToolUse", context)
    return HookOutcome(0, stdout=json.dumps(document)) if document else HookOutcome(0)


def post_tool_use(event: dict, verify_write) -> HookOutcome:
    """``verify_write(agent, path, sha256) -> (passed, reason)`` runs the write probe."""
    if event.get("tool_name") != "Write":
        return HookOutcome(0)
    path = target_path(event)
    content = tool_input(event).get("content")
    if not path or content is None:
        return HookOutcome(0)
    if not isinstance(content, str):
        raise HookInputError(f"hook input: tool_input.content is {json_kind(content)}, not text")
    import hashlib  # only after a Write: the PreToolUse path does not pay for it

    try:
        data = content.encode()
    except UnicodeEncodeError:  # "\ud800": no UTF-8 file holds it; what the client wrote instead is its guess
        raise HookInputError("hook input: tool_input.content is not valid Unicode (a lone surrogate): the write cannot be checked") from None
    expected = hashlib.sha256(data).hexdigest()
    passed, reason = verify_write(agent_for(event), path, expected)
    if passed:
        return HookOutcome(0)
    return HookOutcome(2, stderr=f"lockstep: the write to {path} did not land as written: {reason}")


Decide = Callable[[str, str], "tuple[str, ...]"]  # (agent, path) -> (verdict, reason[, context])
VerifyWrite = Callable[[str, str, str], "tuple[bool, str]"]  # (agent, path, sha256) -> (passed, reason)


def answer(event: dict, decide: Decide, verify_write: VerifyWrite, *, fail_closed: bool = False) -> HookOutcome:
    """The hook's whole answer to one event.  Any failure (no coordinator, an error
    reply, a bug) is ``failed``: a visible warning, or a denial under ``fail_closed``."""
    kind = event.get("hook_event_name")
    try:
        if kind == "PreToolUse":
            return pre_tool_use(event, decide)
        if kind == "PostToolUse":
            return post_tool_use(event, verify_write)
        return HookOutcome(0)
    except Exception as exc:  # noqa: BLE001 - every failure gets an answer the client shows
        return failed(exc, kind, fail_closed)


def failed(exc: BaseException | str, kind: object, fail_closed: bool) -> HookOutcome:
    """The answer when the hook could not do its work (see ``agents.toolwrites.failure``)."""
    from agents.toolwrites import failure

    if isinstance(exc, str):
        problem = exc
    elif isinstance(exc, LockstepError):  # said on purpose: no coordinator, an error reply, not a git repository
        problem = getattr(exc, "message", None) or str(exc)
    else:
        problem = f"unexpected {type(exc).__name__}: {exc}"
    answer = failure("claude", problem, kind if isinstance(kind, str) else None, fail_closed)
    return HookOutcome(0, stdout=answer.stdout)


def in_repository(path: str | None, place, cwd: str) -> bool:
    """Whether ``path`` (as the editor gave it, relative to ``cwd``) is a file of the
    repository ``place`` is in (any of its worktrees); None and bad names are not."""
    from agents.paths import located

    if not path:
        return False
    try:
        located(path, place, cwd, literal=True)
    except LockstepError:  # outside the repository, or a name the system refuses
        return False
    return True


def write_intent(agent: str, path: str, cwd: str, endpoint: str | None = None) -> tuple[str, str, str]:
    """Ask the coordinator whether ``agent`` may write ``path`` (as the editor gave it,
    relative to ``cwd``): ``(verdict, reason, context)``, ``context`` being the agent's
    messages and tasks not shown yet.  A path outside the repository is nobody's
    business: allowed; a path in another worktree of it is refused (``WriteElsewhere``)."""
    from agents.oneshot import open_oneshot
    from agents.paths import WriteElsewhere, check_own_worktree, located
    from protocol.discovery import locate

    place = locate(cwd)
    if not place.in_git:  # an editor outside any repository: nothing to coordinate
        return "allow", "not in a git repository", ""
    try:
        # An editor names one concrete file: its '[', '*' or '?' are part of the name.
        target, root = located(path, place, cwd, literal=True)
    except PeerError:
        return "allow", "outside the repository", ""
    if ".git" in target.split("/"):
        return "allow", "git's own file, not the repository's content", ""
    try:
        check_own_worktree(path, target, root, place)
    except WriteElsewhere as exc:
        return "block", str(exc), ""
    with open_oneshot(agent, cwd=cwd, endpoint=endpoint) as session:
        decision = session.intent([target])
        context = ""
        if decision.inbox:  # something waits for the agent: shown with this answer
            from agents.inbox import fetch

            context = fetch(session, "PreToolUse")
    return decision.verdict, decision.reason, context


def parse_event(text: str) -> dict:
    try:
        event = jsontext.loads(text)
    except ValueError as exc:
        raise HookInputError(f"hook input is not JSON: {exc}") from None
    if not isinstance(event, dict) or not isinstance(event.get("hook_event_name"), str):
        raise HookInputError("hook input has no hook_event_name: is this run as a Claude Code hook?")
    problem = cwd_problem(event)
    if problem is not None:
        raise HookInputError(problem)
    return event
