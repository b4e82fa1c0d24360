"""CLI commands for integrations: ``hook claude``, ``guard`` and ``mcp``."""

from __future__ import annotations

import json
import os
import sys

import click

from protocol import discovery

from .base import EXIT_REFUSED, ask, endpoint_option, handle_errors, json_option, main
from .output import plain, refuse_braces

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
    """Claude Code hook: reads the event JSON on stdin.

    Before Write/Edit/MultiEdit/NotebookEdit (and Bash: the files the command writes;
    an MCP server's write_file, edit_file, create_file or move_file: the files it
    names) it asks for a write intent; a block answers `permissionDecision: deny` with the
    holders, shown to the model. After Write it reads the file back and compares
    hashes; a lost write exits 2 so the model sees it. UserPromptSubmit starts a new
    turn; Stop and SubagentStop run verify on the worktree's content (unless it
    already passed or nothing changed this turn) and block the stop with the
    failures while it fails, at most max_repair_loops times a turn. `lockstep hook
    install claude` registers all of these; by hand, in .claude/settings.json
    (and the same group, without a matcher, for UserPromptSubmit, Stop and
    SubagentStop):

    \b
      "hooks": {"PreToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit|Bash",
                 "hooks": [{"type": "command", "command": "lockstep hook claude"}]}],
                "PostToolUse": [{"matcher": "Write|Bash",
                 "hooks": [{"type": "command", "command": "lockstep hook claude"}]}]}

    A warning (warn mode, no coordinator) is JSON Claude Code shows the user and the
    model (systemMessage, additionalContext); every failure lets the edit go on with
    it, or denies under --fail-closed; it never exits 1.

    \b
    Examples:
      lockstep hook claude < event.json
      lockstep hook claude --fail-closed
    """
    from .fast import hook_claude as hook_claude_verb

    hook_claude_verb(fail_closed, endpoint, as_json=as_json)


def _tool_hook(client: str, fail_closed: bool, endpoint: str | None) -> None:
    from agents import toolwrites
    from agents.hookinput import HookInputError, read_input

    try:
        text = read_input()
    except HookInputError as exc:  # too large, or not UTF-8: still an answer, never exit 1
        answer = toolwrites.failure(client, str(exc), None, fail_closed)
    except OSError as exc:
        answer = toolwrites.failure(client, f"hook input cannot be read ({exc})", None, fail_closed)
    else:
        answer = toolwrites.answer(client, text, endpoint, fail_closed)
    if answer.stdout:
        click.echo(answer.stdout)
    if answer.stderr:
        click.echo(answer.stderr, err=True)
    sys.exit(answer.exit_code)


@hook.command("codex")
@click.option("--fail-closed", is_flag=True, help="Deny the call on every failure (no coordinator, bad input); default: allow with a warning.")
@endpoint_option
@json_option
@handle_errors
def hook_codex(fail_closed, endpoint, as_json):
    """Codex hook (0.124+): reads the event JSON on stdin. Before apply_patch it asks
    for a write intent for every file of the envelope (Update, Add, Delete, Move to);
    before Bash, for the files the command writes (redirections, sed -i, cp, mv, rm,
    git checkout --, an apply_patch heredoc, ...); before an MCP server's write_file,
    edit_file, create_file or move_file, for the files it names. A block answers
    permissionDecision deny naming the holders;
    a warning is a systemMessage and additionalContext. After the call it compares the
    worktree: a file it changed that another agent holds is a decision block telling
    the model. UserPromptSubmit starts a new turn; Stop runs the turn-end gate (as for
    Claude Code: decision block with the failures while verify fails). Other events
    answer {}. It never exits 1.

    \b
    Examples:
      lockstep hook install codex
      lockstep hook codex < event.json
    """
    _tool_hook("codex", fail_closed, endpoint)


@hook.command("gemini")
@click.option("--fail-closed", is_flag=True, help="Deny the call on every failure (no coordinator, bad input); default: allow with a warning.")
@endpoint_option
@json_option
@handle_errors
def hook_gemini(fail_closed, endpoint, as_json):
    """Gemini CLI hook: reads the event JSON on stdin. Before write_file and replace it
    asks for a write intent for the file; before run_shell_command, for the files the
    command writes; before an MCP server's edit_file, create_file, move_file (or
    SERVER__write_file), for the files it names. A block answers {"decision": "deny", "reason": ...} naming the
    holders; a warning is a systemMessage. AfterTool compares the worktree: a file the
    call changed that another agent holds is told to the model (additionalContext).
    BeforeAgent starts a new turn; AfterAgent runs the turn-end gate (decision deny
    with the failures: Gemini CLI retries the turn with them). Other events answer {}.
    It never exits 1.

    \b
    Examples:
      lockstep hook install gemini
      lockstep hook gemini --fail-closed < event.json
    """
    _tool_hook("gemini", fail_closed, endpoint)


@hook.command("install")
@click.argument("client", type=click.Choice(["claude", "codex", "gemini"]))
@click.option("--project", "scope", flag_value="project", default=True, help="This worktree's settings (the default).")
@click.option("--user", "scope", flag_value="user", help="Your user settings, for every project.")
@click.option("--uninstall", is_flag=True, help="Take Lockstep's hooks out instead.")
@click.option("--dry-run", is_flag=True, help="Print the change as a diff; write nothing.")
@click.option("--command", "command", metavar="CMD", help="The hook command to register (default: lockstep hook CLIENT).")
@json_option
@handle_errors
def hook_install(client, scope, uninstall, dry_run, command, as_json):
    """Register (or with --uninstall remove) Lockstep's hooks in a client's settings:
    .claude/settings.json, .codex/hooks.json or .gemini/settings.json (--project, in
    the worktree) or the same under your home folder (--user).

    Merges with what is there and touches nothing else; running it again changes
    nothing. Claude Code: PreToolUse on Write|Edit|MultiEdit|NotebookEdit|Bash and
    MCP file tools (mcp__SERVER__write_file, edit_file, create_file, move_file),
    PostToolUse on Write|Bash, UserPromptSubmit, Stop and SubagentStop. Codex:
    PreToolUse on Bash|apply_patch and the same MCP file tools, PostToolUse on
    Bash|apply_patch, UserPromptSubmit and Stop. Gemini CLI: BeforeTool on
    write_file|replace|run_shell_command and MCP file tools, AfterTool on
    write_file|replace|run_shell_command, BeforeAgent
    and AfterAgent. Turn-end hooks get 600 s (they may wait for a verify run).

    \b
    Examples:
      lockstep hook install claude
      lockstep hook install codex --user --dry-run
      lockstep hook install gemini --uninstall
    """
    from agents import hook_install as installer

    worktree = discovery.locate().worktree if scope == "project" else None
    path = installer.settings_path(client, scope, worktree)
    change = installer.plan(client, path, command=command, uninstall=uninstall)
    if not dry_run:
        installer.apply(change)
    if as_json:
        click.echo(json.dumps({"path": str(path), "changed": change.changed, "dry_run": dry_run, "uninstall": uninstall, "diff": change.diff()}))
        return
    if dry_run:
        click.echo(change.diff() or f"{path}: nothing to change")
    elif not change.changed:
        click.echo(f"{path}: already {'without' if uninstall else 'with'} Lockstep's {client} hooks")
    else:
        click.echo(f"{path}: Lockstep's {client} hooks {'removed' if uninstall else 'installed'}")


# ---------------------------------------------------------------------- git guard


@main.group()
def guard():
    """A git pre-commit / pre-push guard against committing files other agents hold."""


@guard.command("install")
@json_option
@handle_errors
def guard_install(as_json):
    """Install the pre-commit and pre-push hooks in the repository's common hooks
    folder, so they run in every worktree.

    \b
    Examples:
      lockstep guard install
      lockstep guard install --json
    """
    from agents import guard as git_guard

    worktree = _git_worktree()
    before = {path: state for _, path, state in git_guard.inspect(worktree)}
    kept: list = []
    left: list = []
    written = git_guard.install(worktree, kept, left)
    upgraded = [p for p in written if before.get(p) == "stale"]
    added = [p for p in written if before.get(p) == "missing"]
    if as_json:
        click.echo(json.dumps({
            "installed": [str(p) for p in written], "kept": [str(p) for p in kept],
            "added": [str(p) for p in added], "upgraded": [str(p) for p in upgraded], "left": [str(p) for p in left],
        }))
    else:
        why = {p: " (upgraded: an older version's was there)" for p in upgraded} | {
            p: " (already current)" for p in written if before.get(p) == "current"
        }
        lines = [f"installed {p}{why.get(p, '')}" for p in written]
        lines += [f"kept {p} (your hook, which runs lockstep guard {p.name})" for p in kept]
        lines += [f"left {p} (your own hook: no warning when `git stash` takes held changes away; add {git_guard.ADD_LINE[p.name]} to it)" for p in left]
        click.echo("\n".join(lines))


@guard.command("status")
@json_option
@handle_errors
def guard_status(as_json):
    """Say whether the git guard is installed and current: an install by an older
    version lacks newer hooks (pre-merge-commit) or has stale ones; `lockstep guard
    install` upgrades it.

    \b
    Examples:
      lockstep guard status
      lockstep guard status --json
    """
    from agents import guard as git_guard

    hooks = git_guard.inspect(_git_worktree())
    # a user's own hook in place of one that only warns is theirs to keep: not outdated
    states = [state for hook, _, state in hooks if not (state == "foreign" and hook in git_guard.OPTIONAL_HOOKS)]
    if not any(state in ("current", "stale", "yours") for state in states):
        overall = "absent"
    elif any(state in ("stale", "missing", "foreign") for state in states):
        overall = "outdated"
    else:
        overall = "current"
    if as_json:
        click.echo(json.dumps({
            "state": overall, "outdated": overall == "outdated",
            "hooks": [{"hook": hook, "path": str(path), "state": state} for hook, path, state in hooks],
        }))
        return
    if overall == "absent":
        click.echo("the git guard is not installed: run `lockstep guard install`")
        return
    if overall == "current":
        folders = sorted({str(path.parent) for _, path, _ in hooks})
        click.echo(f"the git guard is installed and current ({', '.join(git_guard.HOOKS)} in {', '.join(folders)})")
        return
    wrong = [f"{hook} {state}: {path} ({git_guard.HOOK_STATES[state]})" for hook, path, state in hooks if state in ("stale", "missing")]
    foreign = [
        f"{hook}: {path} is {git_guard.HOOK_STATES['foreign']}: add {git_guard.ADD_LINE[hook]} to it"
        for hook, path, state in hooks if state == "foreign" and hook not in git_guard.OPTIONAL_HOOKS
    ]
    fix = " (an older version installed it): run `lockstep guard install` to upgrade it" if wrong else ""
    click.echo(f"the git guard is outdated{fix}")
    for line in wrong + foreign:
        click.echo(f"  {line}")


def _git_worktree():
    """The current git worktree; outside any repository, bad input said in one line (git
    itself never runs the hooks there), not git's usage text."""
    from protocol.errors import UsageError

    place = discovery.locate()
    if not place.in_git:
        raise UsageError(f"{place.worktree} is not in a git repository: the git guard has no commits to check there")
    return place.worktree


def _check_files(files: list[str], endpoint: str | None, as_json: bool, what: str, unreachable: Exception | None = None) -> None:
    """``unreachable``: the coordinator already did not answer (asked once is waited for once)."""
    from agents import guard as git_guard
    from agents.oneshot import CoordinatorUnreachable

    agent = git_guard.agent_name()
    if not files:
        if as_json:  # one JSON document under --json, even when there is nothing to check
            click.echo(json.dumps({"allowed": True, "reason": f"nothing to {what}", "files": [], "agent": agent}))
        return
    try:
        if unreachable is not None:
            raise unreachable
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


GUARD_BATCH_BYTES = 64 * 1024  # path text per request: a commit of any size fits the message cap
HELD_LISTED = 20  # held files named in a refusal (the rest counted)


def _batches(paths: list[str]) -> list[list[str]]:
    """``paths`` in order, cut into requests of at most ``GUARD_BATCH_BYTES`` of names (a
    vendored tree of 20,000 files was one request over the cap: no commit at all)."""
    batches: list[list[str]] = [[]]
    size = 0
    for path in paths:
        cost = len(path.encode("utf-8", "surrogateescape")) + 8
        if batches[-1] and size + cost > GUARD_BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(path)
        size += cost
    return batches


def _held(files: list[str], agent: str | None, endpoint: str | None) -> tuple[bool, str]:
    """(blocked, reason): as an agent, by write intents; as a person, by live claims."""
    from protocol import messages as m
    from protocol.paths import Pattern, PatternIndex, escape

    named = {escape(path): path for path in files}  # git names files: '[' in a name is a '['
    files = list(named)
    if agent:
        from agents.oneshot import open_oneshot

        with open_oneshot(agent, endpoint=endpoint) as session:
            for batch in _batches(files):
                decision = session.intent(batch)
                if decision.verdict == "block":
                    break
        return decision.verdict == "block", decision.reason
    # A person: the fresh-base gate on this worktree's HEAD (the coordinator's index of the
    # integration branch decides, as for an agent's intent), then others' live claims and
    # merge holds.
    from protocol.gitrefs import merge_heads, read_head

    worktree = discovery.locate().worktree
    head = read_head(worktree)
    if head is not None:  # concluding a merge: the commits it brings are in the commit too
        merging = merge_heads(worktree)
        for batch in _batches(files):
            fresh = ask(endpoint, m.Fresh(paths=batch, head=head, merging=merging))
            if fresh.verdict == "block":
                return True, fresh.reason
            if fresh.verdict == "warn":
                click.echo(f"lockstep guard: warning: {fresh.reason}", err=True)
    state = ask(endpoint, m.Status())
    live = {a.name for a in state.agents if a.state == "alive"}
    claims, holds = list(state.claims), list(state.merge_holds)
    if state.summarised:  # too many claims to list: what overlaps the files, asked folder by folder
        claims, holds = _overlapping(files, endpoint)
    claimed: PatternIndex = PatternIndex()
    for c in claims:
        if c.holder in live:
            claimed.add(Pattern.parse(c.pattern), c)
    merge_held: PatternIndex = PatternIndex()
    for h in holds:
        merge_held.add(Pattern.parse(h.path), h)
    held: list[str] = []
    for path in files:
        query = Pattern.parse(path)
        holders = dict.fromkeys(c.holder for _, c in claimed.overlapping(query))
        held += [f"{named[path]} (held by {holder})" for holder in holders]
        held += [f"{named[path]} (in {h.holder}'s merge hold: {h.reason})" for _, h in merge_held.overlapping(query)]
    if not held:
        return False, "no live agent holds these files"
    more = f", and {len(held) - HELD_LISTED} more" if len(held) > HELD_LISTED else ""
    return True, "held by live agents: " + ", ".join(held[:HELD_LISTED]) + more


def _overlapping(files: list[str], endpoint: str | None) -> tuple[list, list]:
    """The claims and merge holds overlapping ``files`` (patterns, ``/``-separated), from
    status replies narrowed by path: one per top folder the files are in, a folder
    whose reply is itself too big to list asked again subfolder by subfolder, down to
    single files.  (File by file, a commit of 100,000 files took ten minutes.)"""
    from protocol import messages as m

    claims: list = []
    holds: list = []
    pending: list[tuple[int, list[str]]] = [(0, files)]  # (depth of the folder, the files under it)
    while pending:
        depth, group = pending.pop()
        by_child: dict[str, list[str]] = {}
        for path in group:
            parts = path.split("/")
            if len(parts) > depth + 1:
                by_child.setdefault("/".join(parts[: depth + 1]) + "/", []).append(path)
            else:
                part = ask(endpoint, m.Status(path=path))
                claims += part.claims
                holds += part.merge_holds
        for folder, under in by_child.items():
            part = ask(endpoint, m.Status(path=folder)) if len(under) > 1 else None
            if part is None or part.summarised:
                pending.append((depth + 1, under))
            else:
                claims += part.claims
                holds += part.merge_holds
    return claims, holds


@guard.command("pre-commit")
@endpoint_option
@json_option
@handle_errors
def guard_pre_commit(endpoint, as_json):
    """Refuse the commit if a staged file is held by another live agent (as an agent,
    a write intent for each staged file; as a person, any live claim on it).

    \b
    Examples:
      lockstep guard pre-commit        # what the installed hook runs
      LOCKSTEP_AGENT=bob lockstep guard pre-commit --json
    """
    from agents import guard as git_guard
    from agents.oneshot import CoordinatorUnreachable
    from protocol import messages as m
    from protocol.gitrefs import merge_heads

    _endpoint_well_formed(endpoint)
    worktree = _git_worktree()
    files = git_guard.staged_files(worktree)
    merging = merge_heads(worktree)
    unreachable = None
    if merging and files:  # concluding a merge: what it brings from the integration branch is not checked
        try:
            integration = (ask(endpoint, m.Status()).statistics.get("integration") or {}).get("branch")
        except CoordinatorUnreachable as exc:
            integration, unreachable = None, exc  # _check_files says so
        if isinstance(integration, str):
            brought = git_guard.brought_from_integration(worktree, files, merging, integration)
            files = [path for path in files if path not in brought]
    _check_files(files, endpoint, as_json, "commit", unreachable)


@guard.command("stashed")
@click.argument("stash", required=False, default="refs/stash")
@endpoint_option
@json_option
@handle_errors
def guard_stashed(stash, endpoint, as_json):
    """Warn on stderr when `git stash` took changes to files an agent holds out of the
    worktree (what the installed reference-transaction hook runs, for a new stash
    entry): the claim still stands, but the work is in no commit and no longer in the
    worktree. The agent is LOCKSTEP_AGENT, else every live agent of this worktree.
    Always exit 0 (a warning; the stash is made).

    \b
    Examples:
      lockstep guard stashed                 # the newest stash entry
      lockstep guard stashed stash@{1} --json
    """
    from agents import guard as git_guard
    from agents.oneshot import CoordinatorUnreachable
    from protocol import messages as m
    from protocol.paths import Pattern, PatternIndex, escape

    _endpoint_well_formed(endpoint)
    worktree = _git_worktree()
    files = git_guard.stashed_files(worktree, stash)
    held: list[dict] = []
    if files:
        try:
            state = ask(endpoint, m.Status())
            claims = list(state.claims) if not state.summarised else _overlapping(files, endpoint)[0]
        except CoordinatorUnreachable:  # nobody coordinates: nobody holds anything
            state, claims = None, []
        agent = git_guard.agent_name()
        top = os.path.realpath(worktree)
        if state is not None:
            ours = {
                a.name for a in state.agents
                if a.state == "alive" and (a.name == agent if agent else bool(a.worktree) and os.path.realpath(a.worktree) == top)
            }
            claimed: PatternIndex = PatternIndex()
            for c in claims:
                if c.holder in ours:
                    claimed.add(Pattern.parse(c.pattern), c)
            for path in files:
                holders = sorted({c.holder for _, c in claimed.overlapping(Pattern.parse(escape(path)))})
                held += [{"path": path, "holder": holder} for holder in holders]
    if held:
        names = ", ".join(f"{h['path']} ({h['holder']})" for h in held)
        click.echo(
            f"lockstep guard: warning: git stash took the changes to held files out of the worktree: {names}; "
            "the claims stand but the work is in no commit: `git stash pop` it back before releasing",
            err=True,
        )
    if as_json:
        click.echo(json.dumps({"stash": stash, "files": files, "held": held}))


@guard.command("pre-push")
@click.argument("remote", required=False)
@click.argument("url", required=False)
@endpoint_option
@json_option
@handle_errors
def guard_pre_push(remote, url, endpoint, as_json):
    """Refuse the push if a file it changes is held by another live agent (reads git's
    ref lines on stdin).

    \b
    Examples:
      lockstep guard pre-push origin git@example.com:me/repo.git < refs   # as git calls it
      LOCKSTEP_AGENT=bob lockstep guard pre-push --json origin url < refs
    """
    from agents import guard as git_guard
    from agents.oneshot import CoordinatorUnreachable
    from protocol import messages as m

    _endpoint_well_formed(endpoint)
    worktree, updates = _git_worktree(), sys.stdin.read()
    unreachable = None
    try:
        state = ask(endpoint, m.Status())
    except CoordinatorUnreachable as exc:
        state, unreachable = None, exc  # _check_files says so
    # the integration branch's commits are everyone's base, not what this push changes
    integration = (state.statistics.get("integration") or {}).get("branch") if state is not None else None
    files = git_guard.pushed_files(worktree, updates, integration if isinstance(integration, str) else None)
    if state is not None:
        _report_merge_holds(files, state)
    _check_files(files, endpoint, as_json, "push", unreachable)


def _report_merge_holds(files: list[str], state) -> None:
    """Say which pushed files others' merge holds keep (their unmerged commits touch
    them: merging this push and theirs will conflict unless one goes first)."""
    from agents import guard as git_guard
    from protocol.paths import escape

    me = git_guard.agent_name()
    pushed = {escape(path): path for path in files}  # a hold names a pattern: 'a\[1].py' is the file a[1].py
    for hold in state.merge_holds:
        if hold.path in pushed and hold.holder != me:
            click.echo(f"lockstep guard: {pushed[hold.path]} is in {hold.holder}'s merge hold: {hold.reason}", err=True)


def _endpoint_well_formed(endpoint: str | None) -> None:
    """A malformed --endpoint (or LOCKSTEP_ENDPOINT) is bad input (exit 2) at once, in a
    verb that may not call the coordinator for a while or at all: a guard with nothing
    to check passed with it, and `mcp` served stdin with it."""
    given = endpoint or os.environ.get("LOCKSTEP_ENDPOINT")
    if given:
        discovery.check_endpoint(given, to_connect=True)



# ---------------------------------------------------------------------- MCP


@main.command("mcp")
@click.option("--agent", metavar="NAME", envvar="LOCKSTEP_AGENT", help="Act as this agent (default LOCKSTEP_AGENT).")
@endpoint_option
@json_option
@handle_errors
def mcp_server(agent, endpoint, as_json):
    """Serve Lockstep's verbs as MCP tools on stdin/stdout (claim, release, intent,
    status, verify, done, land, tasks, take_task, finish_task, send, inbox), acting as one agent with paths relative to the current
    directory. Register it with an MCP client as the command `lockstep mcp --agent NAME`.
    (Its output is always JSON-RPC; --json is accepted for symmetry.)

    \b
    Examples:
      lockstep mcp --agent alice       # register this command with an MCP client
      claude mcp add lockstep -- lockstep mcp --agent alice
    """

    from agents import mcp
    from agents.oneshot import open_oneshot
    from agents.paths import located_link, repo_relative
    from protocol import messages as m
    from protocol.errors import LockstepError, PeerError, exit_code_of

    from .base import _need_agent
    from .checks import _run_job
    from .claimverb import claim_payload as _claim_payload
    from .state import _status_payload

    name = _need_agent(agent)
    m.check_agent_name(name)  # every tool call would be refused for it: say so now, not per call
    _endpoint_well_formed(endpoint)  # likewise, before serving
    place = discovery.locate()

    def as_agent(body):
        with open_oneshot(name, endpoint=endpoint) as session:
            return body(session)

    def call_tool(tool: str, args: dict):
        try:
            # an intent names concrete files, as an editor does: '[', '*', '?' are part of a name
            literal = tool == "intent" or bool(args.get("literal"))
            given = list(dict.fromkeys(args.get("paths", [])))
            size = sum(len(path.encode()) for path in given)
            if size > m.MAX_MESSAGE_BYTES:  # refused by the coordinator anyway: not resolved one by one first (~0.2 ms each)
                raise PeerError("too_large", f"the paths are {size} bytes; at most {m.MAX_MESSAGE_BYTES} in one call: name folders or globs, or split the call")
            if not literal:  # as on the command line: a pattern's braces are not expanded, and not a name
                for path in given:
                    refuse_braces(path, literal='"literal": true')
            paths = [repo_relative(p, place, literal=literal) for p in given]
            # a symbolic link names itself too, as on the command line (agents.paths)
            links = (located_link(path, place) for path in given)
            paths += [found[0] for found in links if found is not None and found[0] not in paths]
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
            if tool == "tasks":
                reply = ask(endpoint, m.Tasks(op="list", agent=name, all=bool(args.get("all"))))
                return {"tasks": plain(reply.tasks), "message": reply.message}, False
            if tool in ("take_task", "finish_task"):
                op = "take" if tool == "take_task" else "done"
                reply = as_agent(lambda s: s.call(lambda sid: m.Tasks(op=op, id=args["id"], text=args.get("note", ""), session=sid)))
                return {"tasks": plain(reply.tasks), "message": reply.message}, False
            if tool == "send":
                reply = as_agent(lambda s: s.call(lambda sid: m.SendText(to=args["to"], text=args["text"], session=sid)))
                return {"to": args["to"], "message": reply.message}, False
            if tool == "inbox":
                reply = as_agent(lambda s: s.call(lambda sid: m.InboxQuery(session=sid, via="mcp", all=bool(args.get("all")))))
                return {"agent": reply.agent, "messages": plain(reply.messages), "tasks": plain(reply.tasks)}, False
            if tool == "land":
                from agents.land import land
                from protocol.errors import UsageError
                from protocol.paths import CONTROL_CHARACTER

                branch = args.get("branch") or None
                if branch is not None and CONTROL_CHARACTER.search(branch):  # git refuses them in a ref; NUL broke the git call
                    raise UsageError(f"no branch {branch!r} in this repository: a branch name has no control characters")
                landing = land(name, branch=branch, endpoint=endpoint)
                return plain(landing), landing.verdict != "landed"
        except LockstepError as exc:
            code = getattr(exc, "code", None)
            if not (isinstance(code, str) and hasattr(exc, "message")):
                raise
            return {"error": {"code": code, "message": exc.message, "exit_code": exit_code_of(exc)}}, True
        return {"error": {"code": "bad_request", "message": f"unknown tool {tool}"}}, True

    mcp.serve(sys.stdin.buffer, sys.stdout, call_tool)
