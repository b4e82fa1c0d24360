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
from typing import Any, Callable

import click

from protocol.errors import (  # noqa: F401  (EXIT_* and BAD_INPUT_CODES: re-exported for the verb modules)
    BAD_INPUT_CODES,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    LockstepError,
    exit_code_of,
)

DETACHED_ENV = "LOCKSTEP_DETACHED"  # set for the background child of `serve --detach`

# Which module defines each top-level command.  The group imports a verb's module only
# when that verb runs (or when help lists every command), so `lockstep intent` pays for
# pyzmq and msgspec, not for trio, rich or the coordinator's settings.
VERB_MODULES: dict[str, str] = {
    "serve": "serve",
    "stop": "serve",
    "claim": "claims",
    "release": "claims",
    "intent": "claims",
    "status": "state",
    "ledger": "state",
    "top": "state",
    "run": "runs",
    "demo": "runs",
    "check": "checks",
    "verify": "checks",
    "done": "checks",
    "plan": "checks",
    "hook": "hooks",
    "guard": "hooks",
    "mcp": "hooks",
}


def version_text() -> str:
    """The installed package's version (read only when asked: importlib.metadata is slow)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lockstep")
    except PackageNotFoundError:  # running from a source tree
        return "0.0.0+source"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return version_text()
    raise AttributeError(name)


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
        except LockstepError as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, str) and hasattr(exc, "message"):
                _emit_error(as_json, code, exc.message)
            else:
                _emit_error(as_json, "error", str(exc))
            sys.exit(exit_code_of(exc))

    return wrapper


def _out(as_json: bool, payload: Any, text: str) -> None:
    if as_json:
        import msgspec

        click.echo(json.dumps(msgspec.to_builtins(payload)))
    else:
        click.echo(text)


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
        from probes.config import parse_duration

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
    from agents.paths import repo_relative
    from protocol import discovery

    place = discovery.locate()
    return [repo_relative(arg, place) for arg in args]


def _as_agent(agent: str | None, endpoint: str | None, pid: int | None, body: Callable) -> Any:
    """Run ``body(session)`` as ``agent`` in a one-shot call (attaches to a live session)."""
    from agents.oneshot import open_oneshot

    name = _need_agent(agent)
    with open_oneshot(name, endpoint=endpoint, pid=pid) as session:
        return body(session)


def ask(endpoint: str | None, message: Any) -> Any:
    """One anonymous request to this repository's coordinator (no agent session)."""
    from agents import oneshot

    return oneshot.ask(endpoint, message)


def _conflict_lines(conflicts: list) -> str:
    return "\n".join(f"  {c.pattern}: {c.reason}" for c in conflicts)


# ====================================================================== the group


class LazyGroup(click.Group):
    """A group whose verbs are imported on first use (see ``VERB_MODULES``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: set[str] = set()

    def _load(self, module: str) -> None:
        if module not in self._loaded:
            self._loaded.add(module)
            __import__(f"{__package__}.{module}")  # its decorators add its verbs to this group

    def _load_all(self) -> None:
        for module in dict.fromkeys(VERB_MODULES.values()):
            self._load(module)

    @property
    def commands(self) -> dict[str, click.Command]:
        self._load_all()
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = value

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name is None:
            raise TypeError("Command has no name.")
        self._commands[name] = cmd

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = VERB_MODULES.get(cmd_name)
        if module is not None:
            self._load(module)
        elif cmd_name not in self._commands:
            self._load_all()  # a verb a module added without a VERB_MODULES entry
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"lockstep, version {version_text()}")
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version, help="Show the version and exit."
)
def main() -> None:
    """Lockstep: one coordinator for many coding agents working on one repository.

    Agents claim files, folders and globs; the coordinator grants or refuses them
    (modes parallel-strict, parallel-warn, serial), fences writes with tokens, notices
    dead or frozen agents and frees their claims, and records everything in a SQLite
    ledger. Start with `lockstep demo`, then `lockstep serve` in your repository.

    Exit codes: 0 ok/granted/allowed, 1 refused/blocked, 2 usage or bad input,
    3 coordinator unreachable.
    """
