"""The `lockstep` entry point, with a fast path for the verbs run most often.

An editor runs `lockstep hook claude` before every edit and scripts run `lockstep
intent` before every write (or `lockstep claim` first), so their start-up is the agent's
wait; scripts and monitors poll `lockstep status --json`.  Importing click alone costs
about as much as the whole request (~20 ms of ~95 ms measured on 2 cores, see
bench/README.md), so these four verbs are parsed here without click when their arguments are plain (known
options with a separate value, no `--opt=value`, no repeats, no `--`, no help);
anything else falls through to the click group, which parses, helps and reports errors
as it always has.  The bodies below (and ``claimverb.claim``) are the only implementation of the four verbs: the click commands call the same functions, so both
paths print the same bytes and exit with the same codes.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Callable

from .output import (
    EXIT_INTERRUPTED,
    INT64_MAX,
    echo,
    handle_errors,
    interrupted,
    is_interrupt,
    need_agent,
    out,
    repo_paths,
    wants_json,
)

# ---------------------------------------------------------------------- the verbs


@handle_errors
def intent(paths: tuple[str, ...], token: int | None, agent: str | None, endpoint: str | None, as_json: bool, literal: bool = False) -> None:
    """`lockstep intent PATHS`: allow / warn (exit 0) or block (exit 1)."""
    from agents.oneshot import open_oneshot
    from protocol.errors import EXIT_REFUSED

    targets = repo_paths(paths, literal=literal, concrete=True, links=True)
    with open_oneshot(need_agent(agent), endpoint=endpoint) as session:
        reply = session.intent(targets, token=token)
    payload = {
        "verdict": reply.verdict,
        "reason": reply.reason,
        "token": reply.token,
        "holders": reply.holders,
        "conflicts": reply.conflicts,
        "paths": reply.paths,
        "stale": reply.stale,
    }
    out(as_json, payload, f"{reply.verdict}: {reply.reason}")
    if reply.verdict == "block":
        sys.exit(EXIT_REFUSED)


@handle_errors
def hook_claude(fail_closed: bool, endpoint: str | None, as_json: bool) -> None:
    """`lockstep hook claude`: answer one Claude Code hook event read from stdin.

    It always exits 0 (or 2 for a lost write, which Claude Code hands the model): a
    failure of any kind - input that is not an event, no coordinator, a bug - is a
    warning the client shows, or a denial under --fail-closed (agents.hooks.failed)."""
    from agents import hooks

    text = ""
    try:
        from agents.hookinput import read_input

        text = read_input()
        outcome = _claude_outcome(text, fail_closed, endpoint)
    except Exception as exc:  # noqa: BLE001 - exit 1 would be taken as "go ahead", unseen
        outcome = hooks.failed(exc, _event_name(text), fail_closed)
    if outcome.stdout and (outcome.stdout != "{}" or as_json):
        echo(outcome.stdout)
    elif as_json and outcome.exit_code == 0:
        echo("{}")  # no decision: still one JSON document under --json
    if outcome.stderr:
        echo(outcome.stderr, err=True)
    sys.exit(outcome.exit_code)


def _event_name(text: str) -> str | None:
    """The event's name, if ``text`` is an event at all (for answering a failure)."""
    from protocol import jsontext

    try:
        event = jsontext.loads(text)
    except ValueError:
        return None
    name = event.get("hook_event_name") if isinstance(event, dict) else None
    return name if isinstance(name, str) else None


def _claude_outcome(text: str, fail_closed: bool, endpoint: str | None):
    from agents import hooks

    event = hooks.parse_event(text)
    kind, tool = event.get("hook_event_name"), event.get("tool_name")
    # A shell call (the files the command will write), an MCP tool that writes files, or
    # a turn's start or end: decided on the parsed event (a sniff of the text missed
    # "B\u0061sh", which is "Bash" too).
    if kind in ("Stop", "SubagentStop", "UserPromptSubmit") or kind in ("PreToolUse", "PostToolUse") and (
        tool == "Bash" or isinstance(tool, str) and tool.startswith("mcp__")
    ):
        from agents import toolwrites

        if tool != "Bash" and kind in ("PreToolUse", "PostToolUse") and toolwrites.mcp_file_arguments(tool, "claude") is None:
            return hooks.HookOutcome(0)  # an MCP tool that writes no file
        answer = toolwrites.answer("claude", text, endpoint, fail_closed)
        return hooks.HookOutcome(answer.exit_code, answer.stdout, answer.stderr)
    cwd = event.get("cwd") or os.getcwd()
    if event.get("hook_event_name") == "PostToolUse":
        from protocol.discovery import locate

        place = locate(cwd)
        if not place.in_git:  # a write outside any repository: nothing to verify through a coordinator
            return hooks.HookOutcome(0)
        if event.get("tool_name") == "Write" and not hooks.in_repository(hooks.target_path(event), place, cwd):
            return hooks.HookOutcome(0)  # nobody's business, as before the write: the coordinator reads no file outside

    def decide(agent: str, path: str) -> tuple[str, str, str]:
        return hooks.write_intent(agent, path, cwd, endpoint)

    def verify_write(agent: str, path: str, sha256: str) -> tuple[bool, str]:
        from pathlib import Path

        from probes.kinds.common import worktree_top
        from protocol import messages as m

        from .checks import _run_job

        # The check reads files of the worktree it runs in (a submodule's files included):
        # a file of another worktree of the repository is checked from that worktree.
        target = os.path.join(cwd, path)
        probe = m.ProbeRequest(kind="write", name="write", params={"path": target, "sha256": sha256})
        here = worktree_top(Path(cwd))
        resolved = Path(target).resolve()
        where = str(here if here in resolved.parents else worktree_top(resolved.parent))
        gate = _run_job(None, endpoint, lambda s: m.Check(probe=probe, cwd=where, session=s), as_json=True)  # quiet: the answer says it
        return gate.verdict == "pass", gate.reason

    return hooks.answer(event, decide, verify_write, fail_closed=fail_closed)


@handle_errors
def status(agent: str | None, path: str | None, endpoint: str | None, as_json: bool) -> None:
    """`lockstep status`: the mode, agents and claims (only ``agent``'s, only those
    overlapping ``path``)."""
    from protocol import messages as m

    from .output import ask
    from .statusview import status_payload, status_text

    pattern = repo_paths([path])[0] if path is not None else None
    reply = ask(endpoint, m.Status(agent=agent, path=pattern))
    out(as_json, status_payload(reply), status_text(reply))


# ---------------------------------------------------------------------- the fast path

def _parse(args: list[str], flags: set[str], values: set[str]) -> tuple[dict, list[str]] | None:
    """Options and positionals of a plain command line, or None if click should parse it."""
    options: dict = {}
    positionals: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            positionals.append(arg)
        elif arg in flags and arg not in options:
            options[arg] = True
        elif arg in values and arg not in options and i + 1 < len(args):
            value = args[i + 1]
            if not value or value.startswith("-"):
                return None
            options[arg] = value
            i += 1
        else:
            return None  # help, `--opt=value`, `--`, `-`, a repeat, a missing value, an unknown option
        i += 1
    return options, positionals


def _digits(text: str) -> int | None:
    """The number plain ASCII digits spell; None for anything else, or past 64 bits (click judges it)."""
    if not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if number <= INT64_MAX else None


def _fast_intent(args: list[str]) -> Callable[[], None] | None:
    parsed = _parse(args, {"--json", "--literal"}, {"--agent", "--endpoint", "--token"})
    if parsed is None or not parsed[1]:
        return None
    options, paths = parsed
    token = options.get("--token")
    if token is not None and (token := _digits(token)) is None:
        return None
    agent = options.get("--agent") or os.environ.get("LOCKSTEP_AGENT") or None
    extra = {"literal": True} if "--literal" in options else {}
    return lambda: intent(tuple(paths), token, agent, options.get("--endpoint"), as_json="--json" in options, **extra)


def _fast_hook_claude(args: list[str]) -> Callable[[], None] | None:
    parsed = _parse(args, {"--json", "--fail-closed"}, {"--endpoint"})
    if parsed is None or parsed[1]:
        return None
    options = parsed[0]
    return lambda: hook_claude("--fail-closed" in options, options.get("--endpoint"), as_json="--json" in options)


def _fast_claim(args: list[str]) -> Callable[[], None] | None:
    parsed = _parse(args, {"--json", "--literal", "--shared"}, {"--agent", "--endpoint", "--ttl", "--wait", "--pid"})
    if parsed is None or not parsed[1]:
        return None
    options, paths = parsed
    pid = options.get("--pid")
    if pid is not None and (pid := _digits(pid)) is None:
        return None
    agent = options.get("--agent") or os.environ.get("LOCKSTEP_AGENT") or None

    def run_claim() -> None:
        from .claimverb import claim

        claim(
            tuple(paths), "--shared" in options, options.get("--ttl"), options.get("--wait"), "--literal" in options,
            agent, pid, options.get("--endpoint"), as_json="--json" in options,
        )

    return run_claim


def _fast_status(args: list[str]) -> Callable[[], None] | None:
    parsed = _parse(args, {"--json"}, {"--agent", "--path", "--endpoint"})
    if parsed is None or parsed[1]:
        return None
    options = parsed[0]  # --agent has no environment default here, as in the click command
    return lambda: status(options.get("--agent"), options.get("--path"), options.get("--endpoint"), as_json="--json" in options)


def _fast(argv: list[str]) -> Callable[[], None] | None:
    if argv[:1] == ["intent"]:
        return _fast_intent(argv[1:])
    if argv[:1] == ["status"]:
        return _fast_status(argv[1:])
    if argv[:1] == ["claim"]:
        return _fast_claim(argv[1:])
    if argv[:2] == ["hook", "claude"]:
        return _fast_hook_claude(argv[2:])
    return None


def run(argv: list[str] | None = None) -> None:
    """The `lockstep` command (and `python -m agents.cli`).

    A Ctrl-C ends every verb alike, on either path, whenever it lands: exit 130 (the
    shell's 128 + SIGINT, as ``run`` exits when its command is interrupted) with one
    line, ``lockstep: interrupted`` (or the JSON error document under --json), and no
    traceback.  Click's own answer would be "Aborted!" and exit 1, a failure's status."""
    args = sys.argv[1:] if argv is None else list(argv)
    _open_closed_standard_streams()
    try:
        _run(args, argv is not None)
    except BaseException as exc:
        if not is_interrupt(exc):
            raise
        interrupted(wants_json(args))
        sys.exit(EXIT_INTERRUPTED)


def _open_closed_standard_streams() -> None:
    """A standard descriptor closed at start (`<&-`, `>&-`, `2>&-`) becomes /dev/null.

    Python leaves ``sys.stdin`` (``stdout``, ``stderr``) None then, which every read,
    ``isatty()`` and flush of it failed on with a traceback; and the next file or
    socket opened would take the free descriptor, so a command `run` or a check
    starts would write its output into it.  Reading gives end of input; writing is lost,
    as it was."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
            continue  # open after all (Python found it unusable for another reason): leave it
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        os.set_inheritable(fd, True)  # a standard descriptor, as the commands we start expect
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))


def _run(args: list[str], given: bool) -> None:
    command = _fast(args)
    if command is None:
        from .base import main

        main(args=args, prog_name="lockstep" if given else None)
        return
    # What click's standalone mode does around a command, so both paths end alike.
    try:
        try:
            command()
        except EOFError:
            echo(err=True)
            echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            sys.stdout, sys.stderr = _QuietFlush(sys.stdout), _QuietFlush(sys.stderr)
            sys.exit(1)
    except SystemExit as exc:
        _exit_now(exc.code)
    _exit_now(0)


def _exit_now(code: object) -> None:
    """Exit without the interpreter's teardown (freeing every module, pyzmq's and
    msgspec's included): ~5 ms of a ~65 ms hook call on 2 cores.  Safe here because
    the call is over: its socket and zmq context are closed, it holds no files, logs
    nothing and registers no exit handlers, and its output is flushed first (if that
    fails, the ordinary exit reports it as it always did)."""
    if not isinstance(code, int) and code is not None:
        sys.exit(code)  # a message to print: the ordinary way
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: started with that descriptor closed (`>&-`)
                stream.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code or 0)


class _QuietFlush:
    """A stream whose flush ignores a closed pipe (the reader went away), as click does."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
