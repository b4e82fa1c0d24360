"""CLI commands for integrations: ``hook claude``, ``guard`` and ``mcp``."""

from __future__ import annotations

import json
import os
import sys

import click

from protocol import discovery

from .base import EXIT_REFUSED, ask, endpoint_option, handle_errors, json_option, main
from .output import plain

# ---------------------------------------------------------------------- Claude Code


@main.group()
def hook():
    """Editor hooks that ask the coordinator before an agent writes."""


@hook.command("claude")
@click.option("--fail-closed", is_flag=True, help="Deny edits when no coordinator answers (default: allow, with a warning).")
@endpoint_option
@json_option
@handle_errors
def hook_claude(fail_closed, endpoint, as_json):
    """Claude Code hook (PreToolUse and PostToolUse): reads the event JSON on stdin.

    Before Write/Edit/MultiEdit/NotebookEdit it asks for a write intent; a block
    answers `permissionDecision: deny` with the holders, shown to the model. After
    Write it reads the file back and compares hashes; a lost write exits 2 so the
    model sees it. In .claude/settings.json:

      "hooks": {"PreToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit",
                 "hooks": [{"type": "command", "command": "lockstep hook claude"}]}],
                "PostToolUse": [{"matcher": "Write",
                 "hooks": [{"type": "command", "command": "lockstep hook claude"}]}]}
    """
    from .fast import hook_claude as hook_claude_verb

    hook_claude_verb(fail_closed, endpoint, as_json=as_json)


# ---------------------------------------------------------------------- git guard


@main.group()
def guard():
    """A git pre-commit / pre-push guard against committing files other agents hold."""


@guard.command("install")
@json_option
@handle_errors
def guard_install(as_json):
    """Install the pre-commit and pre-push hooks in the repository's common hooks
    folder, so they run in every worktree."""
    from agents import guard as git_guard

    written = git_guard.install(discovery.locate().worktree)
    click.echo(json.dumps({"installed": [str(p) for p in written]}) if as_json else "\n".join(f"installed {p}" for p in written))


def _check_files(files: list[str], endpoint: str | None, as_json: bool, what: str) -> None:
    from agents import guard as git_guard
    from agents.oneshot import CoordinatorUnreachable

    agent = git_guard.agent_name()
    if not files:
        if as_json:  # one JSON document under --json, even when there is nothing to check
            click.echo(json.dumps({"allowed": True, "reason": f"nothing to {what}", "files": [], "agent": agent}))
        return
    try:
        blocked, reason = _held(files, agent, endpoint)
    except CoordinatorUnreachable as exc:  # nobody coordinates: nobody holds anything
        click.echo(f"lockstep guard: {exc}; not checked", err=True)
        if as_json:
            click.echo(json.dumps({"allowed": True, "reason": f"not checked: {exc}", "files": files, "agent": agent}))
        return
    if as_json:
        click.echo(json.dumps({"allowed": not blocked, "reason": reason, "files": files, "agent": agent}))
    if blocked:
        if not as_json:
            click.echo(f"lockstep guard: {what} refused: {reason}", err=True)
        sys.exit(EXIT_REFUSED)


def _held(files: list[str], agent: str | None, endpoint: str | None) -> tuple[bool, str]:
    """(blocked, reason): as an agent, by write intents; as a person, by live claims."""
    from protocol import messages as m
    from protocol.paths import Pattern, overlaps

    if agent:
        from agents.oneshot import open_oneshot

        with open_oneshot(agent, endpoint=endpoint) as session:
            decision = session.intent(files)
        return decision.verdict == "block", decision.reason
    state = ask(endpoint, m.Status())
    live = {a.name for a in state.agents if a.state == "alive"}
    held = [
        f"{path} (held by {c.holder})"
        for path in files
        for c in state.claims
        if c.holder in live and overlaps(Pattern.parse(c.pattern), Pattern.parse(path))
    ]
    return bool(held), ("held by live agents: " + ", ".join(held) if held else "no live agent holds these files")


@guard.command("pre-commit")
@endpoint_option
@json_option
@handle_errors
def guard_pre_commit(endpoint, as_json):
    """Refuse the commit if a staged file is held by another live agent (as an agent,
    a write intent for each staged file; as a person, any live claim on it)."""
    from agents import guard as git_guard

    _check_files(git_guard.staged_files(discovery.locate().worktree), endpoint, as_json, "commit")


@guard.command("pre-push")
@click.argument("remote", required=False)
@click.argument("url", required=False)
@endpoint_option
@json_option
@handle_errors
def guard_pre_push(remote, url, endpoint, as_json):
    """Refuse the push if a file it changes is held by another live agent (reads git's
    ref lines on stdin)."""
    from agents import guard as git_guard

    files = git_guard.pushed_files(discovery.locate().worktree, sys.stdin.read())
    _check_files(files, endpoint, as_json, "push")



# ---------------------------------------------------------------------- MCP


@main.command("mcp")
@click.option("--agent", metavar="NAME", envvar="LOCKSTEP_AGENT", help="Act as this agent (default LOCKSTEP_AGENT).")
@endpoint_option
@json_option
@handle_errors
def mcp_server(agent, endpoint, as_json):
    """Serve Lockstep's verbs as MCP tools on stdin/stdout (claim, release, intent,
    status, verify, done), acting as one agent with paths relative to the current
    directory. Register it with an MCP client as the command `lockstep mcp --agent NAME`.
    (Its output is always JSON-RPC; --json is accepted for symmetry.)"""

    from agents import mcp
    from agents.oneshot import open_oneshot
    from agents.paths import repo_relative
    from protocol import messages as m
    from protocol.errors import LockstepError, exit_code_of

    from .base import _need_agent
    from .checks import _run_job
    from .claims import _claim_payload
    from .state import _status_payload

    name = _need_agent(agent)
    place = discovery.locate()

    def as_agent(body):
        with open_oneshot(name, endpoint=endpoint) as session:
            return body(session)

    def call_tool(tool: str, args: dict):
        try:
            paths = [repo_relative(p, place) for p in args.get("paths", [])]
            if tool == "claim":
                reply = as_agent(lambda s: s.claim(paths, shared=bool(args.get("shared")), ttl=args.get("ttl")))
                payload = _claim_payload(reply)
                return plain(payload), not payload["granted"]
            if tool == "release":
                reply = as_agent(lambda s: s.release(paths, all=bool(args.get("all"))))
                return {"released": reply.patterns}, False
            if tool == "intent":
                reply = as_agent(lambda s: s.intent(paths, token=args.get("token")))
                return plain(reply), reply.verdict == "block"
            if tool == "status":
                return plain(_status_payload(ask(endpoint, m.Status()))), False
            if tool == "verify":
                gate = _run_job(name, endpoint, lambda s: m.Verify(cwd=os.getcwd(), session=s), as_json=True)
                return plain(gate), gate.verdict != "pass"
            if tool == "done":
                gate = as_agent(lambda s: s.call(lambda sid: m.Done(session=sid)))
                return plain(gate), gate.verdict != "pass"
        except LockstepError as exc:
            code = getattr(exc, "code", None)
            if not (isinstance(code, str) and hasattr(exc, "message")):
                raise
            return {"error": {"code": code, "message": exc.message, "exit_code": exit_code_of(exc)}}, True
        return {"error": {"code": "bad_request", "message": f"unknown tool {tool}"}}, True

    mcp.serve(sys.stdin, sys.stdout, call_tool)
