"""Agents on other hosts: `lockstep invite`, `lockstep join`, `lockstep keys`.

On the coordinator's host, ``invite NAME`` asks the coordinator (over its private
local socket) for a one-line join token; in a clone on another host, ``join TOKEN``
enrolls once and keeps the agent's own keypair in the clone's state directory
(``<git common dir>/lockstep/remote.json``, 0600, never tracked).  From then on every
verb in that clone finds the coordinator and its key through discovery.
"""

from __future__ import annotations

import time

import click

from protocol import curve, discovery
from protocol import messages as m

from .base import (
    Failure,
    _out,
    ask,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)
from .output import age_seconds


@main.command()
@click.argument("name")
@click.option("--ttl", metavar="DURATION", default="1h", show_default=True, help="How long the token may be used (e.g. 10m, 1h, 2d).")
@endpoint_option
@json_option
@handle_errors
def invite(name, ttl, endpoint, as_json):
    """Print a one-line join token for agent NAME on another host.

    Run on the coordinator's host (it must serve with --curve). The token holds the
    coordinator's endpoint and public key and a one-time enrollment secret: whoever
    holds it may enroll once, as NAME, until it expires. Give it to `lockstep join`.

    \b
    Examples:
      lockstep invite alice
      lockstep invite ci-runner --ttl 10m --json
    """
    seconds = age_seconds(ttl, "--ttl")  # its help promises days ("2d")
    reply = ask(endpoint, m.Keys(op="invite", name=name, ttl=seconds))
    _out(as_json, {"agent": name, "token": reply.token, "expires": time.time() + seconds}, reply.token)


@main.command()
@click.argument("token")
@click.option("--no-worker", is_flag=True, help="Do not start `lockstep worker` in the background (start it yourself).")
@json_option
@handle_errors
def join(token, no_worker, as_json):
    """Enroll this clone with a coordinator on another host, once.

    TOKEN is the line `lockstep invite NAME` printed there. Makes this agent's own
    CURVE keypair, sends the public key with the one-time secret, and keeps the
    keypair in this clone's state directory (inside .git, 0600). Afterwards every
    verb here (claim, intent, run, the hooks, the guard) talks to that coordinator as
    NAME; set LOCKSTEP_AGENT=NAME. Then starts `lockstep worker` in the background
    (unless --no-worker): the coordinator runs NAME's checks through it, here.

    \b
    Examples:
      lockstep join lockstep-join-1:eyJu...
      lockstep join "$(cat token.txt)" --json
    """
    import zmq

    from agents.oneshot import RequestFailed, _hostname, open_connection

    fields = curve.read_token(token)
    place = discovery.locate()
    if not place.in_git:
        raise Failure("bad_request", "run `lockstep join` inside a clone of the repository", 2)
    endpoint = fields["endpoints"][0]
    public, secret = zmq.curve_keypair()
    curve.remember(endpoint, fields["server_key"], curve.public_of(fields["secret"]), fields["secret"])
    try:
        with open_connection(endpoint) as conn:
            reply = conn.request(m.Enroll(key=public.decode(), roots=curve.root_commits(place.worktree), host=_hostname()))
    except RequestFailed as exc:
        if exc.code != "revoked":
            raise
        # The handshake refused the token's one-time key; the generic words ("this clone's
        # key ... revoked") sent a user holding an expired or spent token looking elsewhere.
        raise Failure("revoked", f"the coordinator at {endpoint} refused this join token: it expired, was used already, "
                      "or its invitation was revoked; ask its operator for a new `lockstep invite NAME`", 1) from None
    state_dir = discovery.ensure_state_dir(place)
    remote = {
        "agent": reply.agent,
        "endpoints": fields["endpoints"],
        "pub": fields["pub"],
        "server_key": fields["server_key"].decode(),
        "public": public.decode(),
        "secret": secret.decode(),
        "repo": reply.repo,
        "joined": time.time(),
    }
    curve.write_private(state_dir / curve.REMOTE_FILE, remote)
    curve.remember_remote(remote)
    with open_connection(endpoint) as conn:  # the new key works
        conn.request(m.Status())
    worker = None if no_worker else start_worker(place)
    payload = {
        "agent": reply.agent, "endpoint": endpoint, "repo": reply.repo, "keyfile": str(state_dir / curve.REMOTE_FILE), "worker": worker,
    }
    started = f"; worker pid {worker} (log {state_dir / WORKER_LOG})" if worker else ""
    _out(as_json, payload, f"lockstep: joined {endpoint} as {reply.agent}; key in {payload['keyfile']}{started}; "
         f"now `export LOCKSTEP_AGENT={reply.agent}`")


WORKER_LOG = "worker.log"


def start_worker(place) -> int | None:
    """Start `lockstep worker` for this clone in the background, unless one runs; its pid."""
    import os
    import subprocess
    import sys

    from agents.worker import running_worker

    if running_worker(place) is not None:
        return running_worker(place)
    with open(place.state_dir / WORKER_LOG, "ab") as log_file:
        os.chmod(place.state_dir / WORKER_LOG, 0o600)
        child = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", "worker"], cwd=place.worktree, stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=log_file, start_new_session=True,
        )
    return child.pid


@main.command()
@click.option("--agent", metavar="NAME", envvar="LOCKSTEP_AGENT", help="The agent this clone joined as (default: the one it joined as).")
@endpoint_option
@json_option
@handle_errors
def worker(agent, endpoint, as_json):
    """Run this clone's agent's checks here, for its coordinator on another host.

    In a clone joined with `lockstep join`: connects with the agent's own key and
    runs the probes the coordinator sends for this worktree (verify, check, plan
    steps, the hooks' write checks), reporting each result as it finishes. Runs
    until stopped (Ctrl-C), dismissed (its key revoked), or refused. `join` starts
    one in the background; `lockstep run` starts one for its command if none runs.
    Under --json it prints one document when it stops.

    \b
    Examples:
      lockstep worker
      lockstep worker --json
    """
    import sys

    from agents.worker import say_line, serve_worker

    lines: list[str] = []
    code = serve_worker(agent, endpoint, lines.append if as_json else say_line)
    if as_json:
        _out(True, {"stopped": lines[-1] if lines else "", "exit": code}, "")
    sys.exit(code)


@main.group()
def keys():
    """The CURVE keys of agents on other hosts (list, revoke)."""


@keys.command("list")
@endpoint_option
@json_option
@handle_errors
def keys_list(endpoint, as_json):
    """List enrolled and revoked keys and open invitations.

    \b
    Examples:
      lockstep keys list
      lockstep keys list --json
    """
    reply = ask(endpoint, m.Keys(op="list"))
    lines = [f"{k.name:20} {k.state:9} {k.key} {k.host}" for k in reply.keys] or ["no keys"]
    _out(as_json, {"keys": reply.keys}, "\n".join(lines))


@keys.command("revoke")
@click.argument("name")
@endpoint_option
@json_option
@handle_errors
def keys_revoke(name, endpoint, as_json):
    """Revoke NAME's key(s) and invitations, at once.

    Its connections are refused from the next message on; its claims follow the
    normal stale rules (its session stops heartbeating).

    \b
    Examples:
      lockstep keys revoke alice
      lockstep keys revoke alice --json
    """
    reply = ask(endpoint, m.Keys(op="revoke", name=name))
    _out(as_json, {"revoked": name, "message": reply.message, "keys": reply.keys}, f"lockstep: {reply.message}")
