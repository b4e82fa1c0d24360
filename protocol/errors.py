"""Errors by who is at fault.

``LockstepError`` is the one base class.  ``PeerError`` means *the other side* sent
something wrong (bad path, malformed frame, unknown agent): the coordinator answers it
with an ``Error`` reply carrying ``code`` and keeps serving; the CLI prints it and exits
with the code's exit status.  ``UsageError`` means our own user's input is wrong (a
flag, ``lockstep.toml``): exit 2, nothing remote involved.  ``LocalError`` means we
misused our own API: a bug, never turned into a reply.
"""

from __future__ import annotations


class LockstepError(Exception):
    """Base class of every exception Lockstep raises on purpose."""


class PeerError(LockstepError):
    """The peer sent something we refuse; safe to report back and keep serving.

    ``code`` is a short machine-readable word (see ``ERROR_CODES``), ``message`` a
    sentence a person can act on.
    """

    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CODES:
            raise LocalError(f"unknown error code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"PeerError({self.code!r}, {self.message!r})"


class UsageError(LockstepError):
    """Our own user's input is wrong (a flag, a config file, a path on the command
    line): they get ``message`` and exit 2.  Not a ``PeerError``: nothing remote is at
    fault, and nothing is sent back over the wire."""

    def __init__(self, message: str, code: str = "usage") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class LocalError(LockstepError):
    """We misused our own API: a bug in Lockstep, not in the peer's input."""


# code -> meaning.  Documented in docs/protocol.md; a test checks the two agree.
ERROR_CODES: dict[str, str] = {
    "malformed": "the frame is not a valid message (bad msgpack, wrong field types, missing fields)",
    "unknown_type": "the message type is not one this coordinator knows",
    "version": "the client speaks a protocol version this coordinator does not",
    "too_large": "the message exceeds the size cap",
    "bad_path": "a path is empty, absolute, malformed or escapes the repository",
    "bad_agent": "an agent name is invalid",
    "bad_request": "the request is well-formed but makes no sense (e.g. nothing to release)",
    "wrong_repo": "the client belongs to another repository than this coordinator",
    "unknown_session": "the session id is not known to this coordinator",
    "session_expired": "the session went stale and its claims were released; open a new one",
    "agent_live": "another live session already uses this agent name",
    "unreachable": "no coordinator answered within the timeout",
    "internal": "the coordinator hit a bug handling this request (it keeps serving)",
    "unavailable": "the coordinator cannot write its ledger (disk full, I/O error): nothing is granted until it can; retry later",
    "forbidden": "this peer's key may not do that: act as another agent's name, or an operator request from another host",
    "revoked": "this peer's key was revoked (`lockstep keys revoke`); join again with a new invitation",
    "no_worker": "a check for a worktree on another host, and no worker runs there to run it",
    "not_found": "the named thing (e.g. a key) does not exist",
    "refused": "understood and refused: e.g. a task another agent has taken, or one already done",
}


# Exit codes of every command (scripts rely on them).
EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
# Error codes that mean "the input is wrong" (exit 2); "unreachable" exits 3; every
# other code (a refusal, an expired session, the coordinator's own bug) exits 1.
BAD_INPUT_CODES = frozenset(
    {"usage", "malformed", "unknown_type", "version", "too_large", "bad_path", "bad_agent", "bad_request", "wrong_repo"}
)


def exit_code_for(code: str) -> int:
    """The exit status for an error ``code``: the one mapping every command, ``run``,
    the hooks and the MCP server use."""
    if code == "unreachable":
        return EXIT_UNREACHABLE
    return EXIT_USAGE if code in BAD_INPUT_CODES else EXIT_REFUSED


def exit_code_of(exc: LockstepError) -> int:
    """The exit status for an error raised on purpose: a ``UsageError`` always exits 2,
    a coded error by its code, anything else 1."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    code = getattr(exc, "code", None)
    return exit_code_for(code) if isinstance(code, str) else EXIT_REFUSED


def _leaves(group: BaseExceptionGroup):
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


class single_errors:
    """Context manager: a nursery's group of exactly one exception becomes that exception.

    Our nurseries run a body plus helper tasks that never fail on their own, so a
    group almost always holds just the body's error; callers should see it as is.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if isinstance(exc, BaseExceptionGroup):
            leaves = list(_leaves(exc))
            if len(leaves) == 1:
                raise leaves[0]
        return False
