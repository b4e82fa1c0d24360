"""What every verb shares that needs no click: printing, errors and their exit codes,
the agent's name, paths, and one-shot calls.

``base`` re-exports these for the click commands; ``fast`` (the argv fast path of the
hot verbs) uses them directly, so both paths print the same bytes and exit the same way.
"""

from __future__ import annotations

import json
import os
import sys
from functools import wraps
from typing import Any, Callable

from protocol.errors import EXIT_USAGE, LockstepError, exit_code_of


def echo(text: str = "", err: bool = False) -> None:
    """Print one line and flush, as ``click.echo`` does for plain text."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(f"{text}\n")
    stream.flush()


class Failure(Exception):
    """Ends a command with an error message and an exit code."""

    def __init__(self, code: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.code, self.message, self.exit_code = code, message, exit_code


def emit_error(as_json: bool, code: str, message: str) -> None:
    if as_json:
        echo(json.dumps({"error": {"code": code, "message": message}}))
    else:
        echo(f"lockstep: {message}", err=True)


EXIT_INTERRUPTED = 130  # 128 + SIGINT: the shell's status for a command ended by Ctrl-C


def wants_json(argv: list[str]) -> bool:
    """Whether a command line asks for JSON (``--json`` among lockstep's own options,
    not after ``--`` where ``run``'s command begins)."""
    options = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in options


class Interrupted(BaseException):
    """A Ctrl-C carried past click's standalone mode, which would say "Aborted!" and exit
    1 (``base.LazyGroup``), to the entry point, which says it once and exits 130."""


def is_interrupt(exc: BaseException) -> bool:
    """A Ctrl-C: KeyboardInterrupt, alone or as the only kind in a nursery's group."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_interrupt(inner) for inner in exc.exceptions)
    return isinstance(exc, (KeyboardInterrupt, Interrupted))


def interrupted(as_json: bool) -> None:
    """Say that a verb was stopped by Ctrl-C (one short line, or the JSON error document)."""
    if not as_json and sys.stderr is not None and sys.stderr.isatty():
        echo(err=True)  # ends the terminal's ^C echo
    emit_error(as_json, "interrupted", "interrupted")


def handle_errors(fn: Callable) -> Callable:
    """Turn every expected failure into its message and exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = kwargs.get("as_json", False)
        try:
            return fn(*args, **kwargs)
        except Failure as exc:
            emit_error(as_json, exc.code, exc.message)
            sys.exit(exc.exit_code)
        except UnicodeEncodeError as exc:  # an argument of bytes that are not UTF-8 (a file's name, a message)
            raw = os.fsencode(exc.object) if isinstance(exc.object, str) else bytes(exc.object)
            shown = raw.decode("utf-8", "backslashreplace")
            emit_error(as_json, "bad_request", f"'{shown}' is not UTF-8 text: Lockstep sends names and text as UTF-8 (rename such a file)")
            sys.exit(EXIT_USAGE)
        except LockstepError as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, str) and hasattr(exc, "message"):
                emit_error(as_json, code, exc.message)
            else:
                emit_error(as_json, "error", str(exc))
            sys.exit(exit_code_of(exc))

    return wrapper


def out(as_json: bool, payload: Any, text: str) -> None:
    if as_json:
        echo(json.dumps(plain(payload)))
    else:
        echo(text)


def plain(value: Any) -> Any:
    """JSON-ready data for output: structs become objects with every field (a stable
    shape), and a wire message loses what only the protocol needs (its ``type`` tag and
    the request id ``req``)."""
    import msgspec

    if isinstance(value, msgspec.Struct):
        from protocol.messages import Message

        skip = {"req"} if isinstance(value, Message) else set()
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__ if name not in skip}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return msgspec.to_builtins(value)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # the integers the wire and the ledger carry
PID_MAX = 2**31 - 1  # pid_t is a signed 32-bit integer


def seconds(text: str, flag: str, most: float | None = None) -> float:
    """A flag's duration: a plain number of seconds, or 250ms / 30s / 5m / 1h30m; at
    most ``most`` seconds if given.

    ``float`` reads "nan", "inf", "1e309" and "-5" too: those are refused as the file's
    durations are (a ``--wait nan`` crashed in ``time.sleep``)."""
    from probes.config import ConfigError, parse_duration

    try:
        value: float | str = float(text)
    except ValueError:
        value = text
    found = parse_duration(value, where=flag)
    if most is not None and found > most:
        raise ConfigError(f"{flag}: {text} is too long: at most {most:g} s")
    return found


def age_seconds(text: str, flag: str) -> float:
    """A flag's age: a number of days ("2d", "1.5d"), or a duration as ``seconds`` reads it."""
    days = text.strip()
    if days.endswith("d") and days[:-1].replace(".", "", 1).isdigit():
        from probes.config import parse_duration

        return parse_duration(float(days[:-1]) * 86400, where=flag)  # refuses what overflows to inf
    return seconds(text, flag)


def need_agent(agent: str | None) -> str:
    if not agent:
        raise Failure(
            "bad_agent",
            "no agent named: pass --agent NAME or set LOCKSTEP_AGENT=NAME (e.g. export LOCKSTEP_AGENT=alice)",
            EXIT_USAGE,
        )
    return agent


def repo_paths(args: tuple[str, ...] | list[str], literal: bool = False, concrete: bool = False, links: bool = False) -> list[str]:
    """Command-line paths (relative to the current directory) as repo-relative patterns.

    ``literal``: each is one file, glob characters included.  ``concrete`` (intents,
    which name files): a path that exists as written is that file, even if its name
    holds ``[``, ``*`` or ``?``; otherwise it is read as a pattern (and a glob refused).
    ``links`` (claim, release, intent): a symbolic link names what it points to and,
    after all the paths' patterns, the link itself (``agents.paths``)."""
    from agents.paths import located_link, repo_relative
    from protocol import discovery

    place = discovery.locate()
    patterns = []
    for arg in args:
        as_file = literal or (concrete and os.path.lexists(arg))
        if not as_file:
            refuse_braces(arg)
        patterns.append(repo_relative(arg, place, literal=as_file))
    if links:
        own = [found[0] for found in (located_link(arg, place) for arg in args) if found is not None]
        patterns += [pattern for pattern in own if pattern not in patterns]
    return patterns


def refuse_braces(arg: str, literal: str = "--literal") -> None:
    """``src/{a,b}.py`` is refused, not claimed as a literal name: Lockstep does not
    expand braces (a shell does, unless the word is quoted).  ``literal``: how the
    caller says "a file named so"."""
    import re

    match = re.search(r"\{([^{}]*,[^{}]*)\}", arg)
    if match is None:
        return
    expanded = " ".join(arg[: match.start()] + part + arg[match.end() :] for part in match.group(1).split(","))
    from protocol.errors import UsageError

    raise UsageError(f"{arg}: braces are not expanded; name each path: {expanded} (or {literal} for a file named so)", code="bad_path")


def as_agent(agent: str | None, endpoint: str | None, pid: int | None, body: Callable) -> Any:
    """Run ``body(session)`` as ``agent`` in a one-shot call (attaches to a live session)."""
    from agents.oneshot import open_oneshot

    name = need_agent(agent)
    with open_oneshot(name, endpoint=endpoint, pid=pid) as session:
        return body(session)


def ask(endpoint: str | None, message: Any) -> Any:
    """One anonymous request to this repository's coordinator (no agent session)."""
    from agents import oneshot

    return oneshot.ask(endpoint, message)


def conflict_lines(conflicts: list) -> str:
    return "\n".join(f"  {c.pattern}: {c.reason}" for c in conflicts)
