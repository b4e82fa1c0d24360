"""``lockstep land``: put a branch in the merge queue and follow it to its verdict."""

from __future__ import annotations

import json
import sys

import click

from protocol import messages as m

from .base import (
    EXIT_REFUSED,
    agent_option,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)
from .checks import _print_failures, _print_result
from .output import need_agent, plain

STAGES = {
    "queued": "queued",
    "preflight": "pre-flight: merging in memory",
    "verifying": "verifying the merged tree",
    "landing": "moving the integration branch",
}


class _Progress:
    """Stage changes and check results on stderr, each said once."""

    def __init__(self) -> None:
        self.said: tuple = ()
        self.shown = 0

    def __call__(self, landing: m.Landing) -> None:
        where = (landing.stage, landing.position if landing.stage == "queued" else 0, landing.attempts)
        if landing.stage != "finished" and where != self.said:
            self.said = where
            line = STAGES.get(landing.stage, landing.stage)
            if landing.stage == "queued":
                line += f" for {landing.target} (job {landing.job}): {landing.position} ahead"
            elif landing.stage == "preflight":
                line += f" {landing.branch} onto {landing.target}" + (f" (attempt {landing.attempts})" if landing.attempts > 1 else "")
            click.echo(f"lockstep land: {line}", err=True)
        for result in landing.results[self.shown :] if landing.stage != "finished" else []:
            _print_result(result)
        if landing.stage != "finished":
            self.shown = len(landing.results)


def _print_conflicts(landing: m.Landing) -> None:
    for conflict in landing.conflicts:
        click.echo(click.style(f"── {conflict.path} ({conflict.kind})", fg="red"), err=True)
        for hunk in conflict.hunks:
            click.echo(f"   line {hunk.get('line')}:", err=True)
            for line in hunk.get("ours", []):
                click.echo(f"   {landing.target}| {line}", err=True)
            for line in hunk.get("theirs", []):
                click.echo(f"   {landing.branch}| {line}", err=True)
        for commit in conflict.commits:
            who = commit.author + (f" (agent {commit.agent})" if commit.agent and commit.agent != commit.author else "")
            click.echo(f"   changed on {landing.target} in {commit.commit[:10]} by {who}: {commit.subject}", err=True)


@main.command()
@click.option("--branch", metavar="B", help="The branch to land (default: the one checked out in this worktree).")
@agent_option
@endpoint_option
@json_option
@handle_errors
def land(branch, agent, endpoint, as_json):
    """Land a branch on the integration branch through the coordinator's merge queue.

    One landing at a time per integration branch, in order (or one batch of them:
    [land] batch): the branch is merged in memory (git merge-tree) onto the
    integration tip, the merged tree is verified with the repository's [checks] in
    the coordinator's scratch worktree, and only then does the integration branch move
    (compare-and-swap: a concurrent push is never overwritten; the landing goes round
    again). Progress goes to stderr. Verdicts:
    landed (exit 0; your claims and merge holds on the files it changed are freed),
    conflict (the files, hunks and the integration commits and agents it meets),
    failed (the checks that failed on the merged tree), stale (the branch moved while
    queued), blocked (e.g. the integration branch's checkout has local changes); all
    exit 1, and you keep your claims. 2 bad input, 3 coordinator unreachable.

    \b
    Examples:
      lockstep land --agent bob
      lockstep land --agent bob --branch feature/x --json
    """
    from agents.land import land as land_branch

    name = need_agent(agent)
    landing = land_branch(name, branch=branch, endpoint=endpoint, on_progress=None if as_json else _Progress(),
                          on_notice=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(plain(landing)))
    else:
        if landing.verdict == "conflict":
            _print_conflicts(landing)
        elif landing.verdict == "failed":
            _print_failures(landing.results)
        click.echo(f"{landing.verdict}: {landing.reason}")
    if landing.verdict != "landed":
        sys.exit(EXIT_REFUSED)
