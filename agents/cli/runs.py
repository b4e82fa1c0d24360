"""`lockstep run` and `lockstep demo`: commands that run other processes as agents."""

from __future__ import annotations

import sys

import click

from .base import (
    _need_agent,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--agent", metavar="NAME", envvar="LOCKSTEP_AGENT", help="The agent's name (default LOCKSTEP_AGENT).")
@click.option("--no-watch", is_flag=True, help="Do not watch the worktree for writes (hooks and the git guard still check them).")
@endpoint_option
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@handle_errors
def run(agent, no_watch, endpoint, as_json, command):
    """Run COMMAND as agent NAME: lockstep run --agent NAME -- CMD ARGS...

    Registers NAME with CMD's pid watched, heartbeats for it, sets LOCKSTEP_AGENT=NAME
    for CMD and its children, forwards SIGINT/SIGTERM/SIGHUP, releases NAME's claims when CMD
    exits and exits with CMD's code (128+N if killed by signal N;
    127 if CMD is not found, 126 if it cannot be run). Refused (exit 1) if
    NAME is already live; exit 3 without starting CMD if no coordinator answers.

    Every write in the worktree (outside .git, not git-ignored) is reported as NAME's
    write intent as it happens: a free file is claimed for NAME, a file another agent
    holds is recorded and published as a conflict (and said on stderr).

    \b
    Examples:
      lockstep run --agent alice -- claude
      lockstep run --agent ci -- make test
    """
    from agents.run import run_as_agent

    sys.exit(run_as_agent(_need_agent(agent), list(command), endpoint, as_json, watch=not no_watch))


@main.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway repository (its path is printed).")
@json_option
@handle_errors
def demo(keep, as_json):
    """A two-minute tour: a throwaway repository, three worktrees, three agents.

    Starts a coordinator, shows claims granted and refused, an intent blocked, one
    agent killed with SIGKILL and its claims released at once, then a summary.

    \b
    Examples:
      lockstep demo
      lockstep demo --keep
      lockstep demo --json | jq .ok
    """
    from agents.demo import run_demo

    sys.exit(run_demo(keep=keep, as_json=as_json))
