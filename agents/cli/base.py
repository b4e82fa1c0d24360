"""The ``lockstep`` command line.

Exit codes (scripts rely on them): 0 ok / granted / allowed (warn included),
1 refused / blocked / failed, 2 usage or bad input, 3 coordinator unreachable.
Every command that prints state takes ``--json``; in JSON mode an error prints
``{"error": {"code": ..., "message": ...}}`` on stdout.
"""

from __future__ import annotations

import re
from typing import Any

import click

from protocol.errors import (  # noqa: F401  (re-exported for the verb modules)
    BAD_INPUT_CODES,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)

from .output import (  # noqa: F401  (re-exported for the verb modules under their old names)
    INT64_MAX,
    INT64_MIN,
    Failure,
    Interrupted,
    ask,
    handle_errors,
    is_interrupt,
)
from .output import as_agent as _as_agent  # noqa: F401
from .output import conflict_lines as _conflict_lines  # noqa: F401
from .output import emit_error as _emit_error  # noqa: F401
from .output import need_agent as _need_agent  # noqa: F401
from .output import out as _out  # noqa: F401
from .output import repo_paths as _paths  # noqa: F401
from .output import seconds as _seconds  # noqa: F401


class Int64(click.types.IntParamType):
    """An integer flag that fits the wire and the ledger (at least ``minimum``): Python
    parses any integer, and a larger one failed to encode in a traceback; now a usage
    error (exit 2).  Its help shows no range of 19-digit numbers."""

    def __init__(self, minimum: int = INT64_MIN) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        number = super().convert(value, param, ctx)
        if not INT64_MIN <= number <= INT64_MAX:
            self.fail(f"{number} is out of range: integers must fit in 64 bits", param, ctx)
        if number < self.minimum:
            self.fail(f"{number} is less than {self.minimum}", param, ctx)
        return number


INT64 = Int64()

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
    "abandon": "claims",
    "status": "state",
    "ledger": "state",
    "top": "state",
    "run": "runs",
    "demo": "runs",
    "check": "checks",
    "verify": "checks",
    "done": "checks",
    "plan": "checks",
    "land": "land",
    "hook": "hooks",
    "guard": "hooks",
    "mcp": "hooks",
    "report": "report",
    "where": "report",
    "invite": "remote",
    "join": "remote",
    "worker": "remote",
    "keys": "remote",
    "tasks": "inbox",
    "send": "inbox",
    "inbox": "inbox",
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
            for command in self._commands.values():
                _examples_last(command)

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

    # Under --json a usage error is one JSON document on stdout too (exit 2), so a
    # script never has to parse click's text: the group sees every parse error, its
    # own and each verb's (verbs parse inside the group's invoke). A Ctrl-C leaves as
    # `Interrupted`, for the entry point to answer (exit 130), not click (exit 1).

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any) -> click.Context:
        if parent is None:
            self._argv = list(args)
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _in_json(exc, self._argv) from None
        except (KeyboardInterrupt, BaseExceptionGroup) as exc:
            if is_interrupt(exc):
                raise Interrupted() from None  # past click's "Aborted!" (exit 1): see fast.run
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _in_json(exc, getattr(self, "_argv", [])) from None
        except (KeyboardInterrupt, BaseExceptionGroup) as exc:
            if is_interrupt(exc):
                raise Interrupted() from None  # past click's "Aborted!" (exit 1): see fast.run
            raise


EXAMPLES = re.compile(r"\n[ \t]*\x08[ \t]*\n[ \t]*Examples:[ \t]*\n")


def _examples_last(command: click.Command) -> None:
    """A docstring's closing examples block (after a ``\\b`` line) goes after the
    options, as click's epilog, so every --help ends with examples, unwrapped."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _examples_last(sub)
    if command.help and not command.epilog:
        parts = EXAMPLES.split(command.help, maxsplit=1)
        if len(parts) == 2:
            command.help = parts[0].rstrip()
            command.epilog = "\b\nExamples:\n" + "\n".join("  " + line.strip() for line in parts[1].strip().splitlines())


class JsonUsageError(click.UsageError):
    """A usage error shown as ``{"error": {"code": "usage", ...}}`` on stdout."""

    def show(self, file: Any = None) -> None:
        _emit_error(True, "usage", self.format_message())


class OneLineUsageError(click.UsageError):
    """A usage error as one line on stderr, like every other error (``lockstep: MESSAGE``),
    with the verb's usage and where its help is, instead of click's four-line block."""

    def show(self, file: Any = None) -> None:
        message = " ".join(self.format_message().split())
        ctx = self.ctx
        if ctx is not None:
            usage = " ".join([ctx.command_path, *ctx.command.collect_usage_pieces(ctx)])
            message += f" (usage: {usage}; see {ctx.command_path} --help)"
        _emit_error(False, "usage", message)


# A bare group's help, shown as a usage error since click 8.2 (8.1 printed it and exited 0).
NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _in_json(exc: click.UsageError, argv: list[str]) -> click.UsageError:
    """The usage error as the output asks: one JSON document under --json, else one line
    (a bare group, `lockstep guard`, still shows its help)."""
    if isinstance(exc, (JsonUsageError, OneLineUsageError, NO_ARGS_IS_HELP)):
        return exc
    options = argv[: argv.index("--")] if "--" in argv else argv
    if "--json" not in options:
        return OneLineUsageError(exc.format_message(), exc.ctx)
    return JsonUsageError(exc.format_message(), exc.ctx)


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
    3 coordinator unreachable, 130 interrupted (Ctrl-C).
    """
