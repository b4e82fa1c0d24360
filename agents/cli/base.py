"""The ``lockstep`` command line.

Exit codes (scripts rely on them): 0 ok / granted / allowed (warn included),
1 refused / blocked / failed, 2 usage or bad input, 3 coordinator unreachable.
Every command that prints state takes ``--json``; in JSON mode an error prints
``{"error": {"code": ..., "message": ...}}`` on stdout.
"""

from __future__ import annotations

import json
import sys
from functools import wraps
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

import click
import msgspec
import trio

from agents.client import (
    CoordinatorUnreachable,
    RequestFailed,
    open_agent,
    open_connection,
    resolve_endpoint,
)
from agents.paths import repo_relative
from probes.config import parse_duration
from protocol import discovery
from protocol import messages as m
from protocol.errors import LockstepError, PeerError, UsageError

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
DETACHED_ENV = "LOCKSTEP_DETACHED"  # set for the background child of `serve --detach`
# Error codes that mean "your input is wrong" (exit 2); every other error code exits 1.
BAD_INPUT_CODES = {"malformed", "unknown_type", "version", "too_large", "bad_path", "bad_agent", "bad_request", "wrong_repo"}

try:
    __version__ = version("lockstep")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"


class Failure(Exception):
    """Ends a command with an error message and an exit code."""

    def __init__(self, code: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.code, self.message, self.exit_code = code, message, exit_code


def _emit_error(as_json: bool, code: str, message: str) -> None:
    if as_json:
        click.echo(json.dumps({"error": {"code": code, "message": message}}))
    else:
        click.echo(f"lockstep: {message}", err=True)


def handle_errors(fn: Callable) -> Callable:
    """Turn every expected failure into its message and exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = kwargs.get("as_json", False)
        try:
            return fn(*args, **kwargs)
        except Failure as exc:
            _emit_error(as_json, exc.code, exc.message)
            sys.exit(exc.exit_code)
        except CoordinatorUnreachable as exc:
            _emit_error(as_json, "unreachable", str(exc))
            sys.exit(EXIT_UNREACHABLE)
        except (RequestFailed, PeerError) as exc:
            _emit_error(as_json, exc.code, exc.message)
            sys.exit(EXIT_USAGE if exc.code in BAD_INPUT_CODES else EXIT_REFUSED)
        except UsageError as exc:
            _emit_error(as_json, exc.code, exc.message)
            sys.exit(EXIT_USAGE)
        except LockstepError as exc:
            _emit_error(as_json, "error", str(exc))
            sys.exit(EXIT_REFUSED)

    return wrapper


def _out(as_json: bool, payload: Any, text: str) -> None:
    click.echo(json.dumps(msgspec.to_builtins(payload)) if as_json else text)


json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
endpoint_option = click.option(
    "--endpoint",
    metavar="URL",
    help="Coordinator endpoint (ipc://PATH or tcp://127.0.0.1:PORT). Default: LOCKSTEP_ENDPOINT, else the "
    "running coordinator of this repository, found from any of its worktrees.",
)
agent_option = click.option(
    "--agent",
    metavar="NAME",
    envvar="LOCKSTEP_AGENT",
    help="Act as this agent (default: LOCKSTEP_AGENT). A new name opens a session.",
)


def _seconds(text: str, flag: str) -> float:
    """A flag's duration: a plain number of seconds, or 250ms / 30s / 5m / 1h30m."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text, where=flag)


def _need_agent(agent: str | None) -> str:
    if not agent:
        raise Failure(
            "bad_agent",
            "no agent named: pass --agent NAME or set LOCKSTEP_AGENT=NAME (e.g. export LOCKSTEP_AGENT=alice)",
            EXIT_USAGE,
        )
    return agent


def _paths(args: tuple[str, ...]) -> list[str]:
    place = discovery.locate()
    return [repo_relative(arg, place) for arg in args]


def _as_agent(agent: str | None, endpoint: str | None, pid: int | None, body: Callable) -> Any:
    """Run ``body(session)`` as ``agent`` in a one-shot call (attaches to a live session)."""
    name = _need_agent(agent)

    async def main() -> Any:
        async with open_agent(name, endpoint=endpoint, kind="oneshot", pid=pid, heartbeat=False) as session:
            return await body(session)

    return trio.run(main)


def ask(endpoint: str | None, message: m.Request) -> m.Reply:
    """One anonymous request to this repository's coordinator (no agent session)."""
    address = resolve_endpoint(discovery.locate(), endpoint)

    async def request() -> m.Reply:
        async with open_connection(address) as conn:
            return await conn.request(message)

    return trio.run(request)


def _conflict_lines(conflicts: list[m.Conflict]) -> str:
    return "\n".join(f"  {c.pattern}: {c.reason}" for c in conflicts)


# ====================================================================== the group


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="lockstep")
def main() -> None:
    """Lockstep: one coordinator for many coding agents working on one repository.

    Agents claim files, folders and globs; the coordinator grants or refuses them
    (modes parallel-strict, parallel-warn, serial), fences writes with tokens, notices
    dead or frozen agents and frees their claims, and records everything in a SQLite
    ledger. Start with `lockstep demo`, then `lockstep serve` in your repository.

    Exit codes: 0 ok/granted/allowed, 1 refused/blocked, 2 usage or bad input,
    3 coordinator unreachable.
    """
