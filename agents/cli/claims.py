"""`lockstep claim`, `release` and `intent`: an agent's ownership verbs."""

from __future__ import annotations

import os

import click

from protocol import messages as m

from .base import (
    EXIT_USAGE,
    INT64,
    Failure,
    _as_agent,
    _out,
    _paths,
    agent_option,
    ask,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--shared", is_flag=True, help="Claim for shared use (others may share it; nobody may take it exclusively).")
@click.option("--ttl", metavar="S", help="Release the claim by itself after this long (e.g. 30m).")
@click.option(
    "--wait",
    metavar="S",
    help="If refused, keep trying for up to this long, saying whom it waits for (a spinner with the time left on a "
    "terminal); the ledger gets one claim.refused for the whole wait, not one per retry. At most 24h.",
)
@click.option("--literal", is_flag=True, help="Each PATH is one file or folder named as written: [, * and ? are not globs.")
@agent_option
@click.option("--pid", type=INT64, help="With a new agent name: its session lives as long as this local process.")
@endpoint_option
@json_option
@handle_errors
def claim(paths, shared, ttl, wait, literal, agent, pid, endpoint, as_json):
    """Claim files, folders (dir/) or globs (src/**/*.py) for an agent.

    A multi-path claim is all-or-nothing and gets one fencing token. Exit 0 when
    granted (warnings included), 1 when refused (the holders are named). A file
    whose name holds glob characters is claimed with --literal, or escaped:
    app/\\[slug]/page.tsx (a backslash before *, ?, [ or ] means that character).

    \b
    Examples:
      lockstep claim src/api/ --agent bob
      lockstep claim 'src/**/*.py' --shared --ttl 30m --agent bob
      lockstep claim src/app.py --wait 2m --json --agent bob
    """
    from .claimverb import claim as claim_verb

    claim_verb(paths, shared, ttl, wait, literal, agent, pid, endpoint, as_json=as_json)


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--all", "release_all", is_flag=True, help="Release every claim of the agent.")
@click.option("--force", is_flag=True, help="Operator: free whoever holds PATH (logged; the holder is notified).")
@click.option("--reason", metavar="TEXT", help="Why (required with --force).")
@click.option("--literal", is_flag=True, help="Each PATH is one file or folder named as written, as claimed with claim --literal.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def release(paths, release_all, force, reason, literal, agent, endpoint, as_json):
    """Release an agent's claims on PATHs, or --all of them; --force frees anyone's.

    Name the claims as they were claimed: a file claimed with --literal
    (app/[slug]/page.tsx) is released with --literal too, or escaped
    (app/\\[slug]/page.tsx).

    \b
    Examples:
      lockstep release --literal 'app/[slug]/page.tsx' --agent bob
      lockstep release --all --agent bob
      lockstep release src/api/ --force --reason 'alice is away'
    """
    if force:
        if not paths or not reason:
            raise Failure("bad_request", "--force needs the PATHs to free and --reason TEXT", EXIT_USAGE)
        by = agent or os.environ.get("USER") or "operator"
        reply = ask(endpoint, m.Release(paths=_paths(paths, literal=literal, links=True), force=True, reason=reason, by=by))
    else:
        if not paths and not release_all:
            raise Failure("bad_request", "name the PATHs to release, or pass --all", EXIT_USAGE)
        if paths and release_all:
            raise Failure("bad_request", f"--all releases every claim, so PATHs ({' '.join(paths)}) make no sense with it: pass one or the other", EXIT_USAGE)
        patterns = _paths(paths, literal=literal, links=True) if paths else []

        def body(session):
            return session.release(patterns, all=release_all)

        reply = _as_agent(agent, endpoint, None, body)
    payload = {"released": reply.patterns, "holders": reply.holders, "uncommitted": reply.uncommitted, "warning": reply.warning}
    text = f"released {', '.join(reply.patterns) or 'nothing'}" + (f"\nwarning: {reply.warning}" if reply.warning else "")
    _out(as_json, payload, text)


@main.command()
@click.argument("branch")
@click.option("--reason", metavar="TEXT", help="Why (logged with the freed holds).")
@endpoint_option
@json_option
@handle_errors
def abandon(branch, reason, endpoint, as_json):
    """Operator: give up on BRANCH; free the merge holds waiting for it.

    A path released with commits that have not reached the integration branch stays
    held (a merge hold) until they do. When that branch will never be merged, this
    frees its paths for everyone (logged). Exit 2 if no merge hold waits for BRANCH.

    \b
    Examples:
      lockstep abandon w3 --reason 'the experiment was dropped'
      lockstep abandon w3 --json
    """
    by = os.environ.get("LOCKSTEP_AGENT") or os.environ.get("USER") or "operator"
    reply = ask(endpoint, m.Abandon(branch=branch, reason=reason or "", by=by))
    payload = {"released": reply.patterns, "holders": reply.holders, "branch": branch}
    _out(as_json, payload, f"abandoned {branch}: freed {', '.join(reply.patterns)}")


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--token", type=INT64, help="The fencing token of the grant this write relies on.")
@click.option("--literal", is_flag=True, help="Each PATH is one file, even if its name holds [, * or ?.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def intent(paths, token, literal, agent, endpoint, as_json):
    """Ask before writing these files: allow, warn or block.

    A PATH that exists as written is that file even if its name holds glob characters
    (app/[slug]/page.tsx); a new one needs --literal or escapes (app/\\[slug]/page.tsx).

    In the parallel modes an allowed intent on an unclaimed path claims it for the
    writer (auto-claim). With --token, the write is refused unless that token is the
    agent's live grant of each path. Exit 0 on allow/warn, 1 on block.

    \b
    Examples:
      lockstep intent src/api/x.py --agent bob
      lockstep intent src/api/x.py --token 7 --agent bob --json
    """
    from .fast import intent as intent_verb

    intent_verb(paths, token, agent, endpoint, as_json=as_json, literal=literal)
