"""`lockstep serve` and `lockstep stop`: the one place the client side starts the server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import click
import trio

from probes.settings import settings
from protocol import discovery
from protocol import messages as m
from protocol.errors import single_errors

from .base import (
    DETACHED_ENV,
    EXIT_REFUSED,
    INT64,
    Failure,
    _out,
    _seconds,
    ask,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)

# Probes a coordinator runs at once: each is a process (or a fetch) of its own, so
# 2**63 was as good as no limit at all.
MAX_PROBE_LIMIT = 1024


def _setting_options(fn):
    """One option per setting that has a flag, generated from the settings schema
    (``probes.settings``): the flag, its help (meaning and default) and its choices."""
    for s in reversed(settings()):
        if s.flag is None:
            continue
        help_text = f"{s.meaning[:1].upper()}{s.meaning[1:]} (default {s.default_text})."
        if s.flag.startswith("--no-"):
            help_text = f"Turn off: {s.meaning} (on by default)."
            option = click.option(s.flag, s.name, flag_value=False, default=None, help=help_text)
        elif s.choices:
            option = click.option(s.flag, s.name, type=click.Choice(s.choices), help=help_text)
        elif isinstance(s.default, bool) or not isinstance(s.default, int):
            option = click.option(s.flag, s.name, metavar=s.metavar, help=help_text)
        else:
            option = click.option(s.flag, s.name, type=INT64, metavar=s.metavar, help=help_text)
        fn = option(fn)
    return fn


def _flag_values(flags: dict[str, object]) -> dict[str, object]:
    """The flags' values in the settings' units: durations in seconds."""
    values = dict(flags)
    for s in settings():
        if s.flag and isinstance(s.default, float) and values.get(s.name) is not None:
            values[s.name] = _seconds(str(values[s.name]), s.flag)
    return values


@main.command()
@_setting_options
@click.option(
    "--endpoint",
    metavar="URL",
    help="Where to listen: ipc://PATH or tcp://127.0.0.1:PORT (default: LOCKSTEP_ENDPOINT, else an ipc socket "
    "in the state directory). A non-loopback tcp://ADDR:PORT only with --curve.",
)
@click.option(
    "--curve",
    is_flag=True,
    help="Serve agents on other hosts at the tcp --endpoint, each authenticated by its CURVE key "
    "(`lockstep invite`, `lockstep join`); local agents keep the private ipc socket.",
)
@click.option("--pub-endpoint", metavar="URL", help="Publication endpoint (default: beside the request endpoint).")
@click.option("--probe-limit", type=click.IntRange(min=1, max=MAX_PROBE_LIMIT), metavar="N",
              help=f"Probes run at once, 1 to {MAX_PROBE_LIMIT} (default: the CPU count).")
@click.option("--detach", is_flag=True, help="Run in the background; return once it serves.")
@json_option
@handle_errors
def serve(endpoint, pub_endpoint, probe_limit, detach, as_json, curve, **flags):
    """Run the coordinator for the repository of the current directory.

    One per repository: every worktree finds it. Settings come from these flags, then
    the [coordinator] table of lockstep.toml at the repository root, then defaults.
    State (endpoints, ledger.db, coordinator.log) lives in <git common dir>/lockstep.

    \b
    Examples:
      lockstep serve --detach
      lockstep serve --heartbeat 1 --liveness 5
      lockstep serve --endpoint tcp://10.0.0.1:7400 --curve --detach
    """
    from coordinator.settings import (  # the one import of the server side
        durability_source,
        load_settings,
    )

    place = discovery.locate()
    values = _flag_values(flags)
    settings = load_settings(place.worktree, remote=curve, **values)
    durability = durability_source(place.worktree, remote=curve, flag=values.get("fsync"))
    state_dir = discovery.ensure_state_dir(place)
    rpc, pub = discovery.default_endpoints(state_dir)
    remote = None
    if curve:  # local agents on the ipc sockets, other hosts on the CURVE tcp endpoint
        if not (endpoint or "").startswith("tcp://"):
            raise Failure("usage", "--curve needs --endpoint tcp://ADDR:PORT (the address other hosts reach)", 2)
        remote_rpc = discovery.check_endpoint(endpoint, curve=True)
        remote = (remote_rpc, discovery.check_endpoint(pub_endpoint or _pub_beside(remote_rpc), curve=True))
    else:
        rpc = discovery.check_endpoint(endpoint or os.environ.get("LOCKSTEP_ENDPOINT") or rpc)
        pub = discovery.check_endpoint(pub_endpoint or (_pub_beside(rpc) if endpoint else pub))
    try:
        lock_fd = discovery.acquire_serve_lock(state_dir)
    except discovery.AlreadyServing as exc:
        raise _already_serving(place, exc.info) from None
    if detach:
        os.close(lock_fd)  # the background child takes it; a running one was named above, its log untouched
        return _serve_detached(place, as_json)
    _setup_logging(state_dir, foreground=not os.environ.get(DETACHED_ENV))
    from coordinator.server import Server

    try:
        with single_errors():  # an error of start-up raised in the nursery (a ledger that cannot be replayed): as is
            reason = trio.run(Server(place, settings, rpc, pub, probe_limit, remote=remote, durability=durability).serve)
    finally:
        os.close(lock_fd)
    if as_json:
        click.echo(json.dumps({"stopped": reason}))


def _pub_beside(endpoint: str) -> str:
    if endpoint.startswith("tcp://"):
        host, port = endpoint.rsplit(":", 1)
        return f"{host}:{int(port) + 1}" if port != "0" and port != "*" else f"{host}:0"
    return endpoint + ".pub"


def _private_log(state_dir: Path) -> Path:
    """The log file, created (or narrowed to) 0600: it names agents, paths and commands."""
    path = state_dir / discovery.LOG_FILE
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    os.chmod(path, 0o600)
    return path


def _setup_logging(state_dir: Path, foreground: bool) -> None:
    handlers: list[logging.Handler] = [logging.FileHandler(_private_log(state_dir))]
    if foreground:  # a detached coordinator's stderr is the log file already
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", handlers=handlers, force=True)


def _already_serving(place: discovery.Place, info: dict) -> Failure:
    since = info.get("started")
    when = f", since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if isinstance(since, (int, float)) else ""
    return Failure(
        "already_serving",
        f"already serving {place.repo_id} (pid {info.get('pid', '?')}{when}, "
        f"endpoint {', '.join(info.get('endpoints', ['?']))}); stop it with `lockstep stop`",
        EXIT_REFUSED,
    )


def _last_said(log_path: Path, start: int) -> str:
    """The last line the detached child wrote to the log after ``start`` (its error: the
    foreground error line, or the message of its JSON error document), else ""."""
    try:
        with open(log_path, "rb") as log:
            log.seek(start)
            lines = [line.strip() for line in log.read(64 * 1024).decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    if not lines:
        return ""
    last = lines[-1]
    try:
        document = json.loads(last)
        last = document["error"]["message"]
    except (ValueError, KeyError, TypeError):
        pass
    return str(last).removeprefix("lockstep: ")[:500]


def _serve_detached(place: discovery.Place, as_json: bool) -> None:
    argv = [a for a in sys.argv[1:] if a != "--detach"]
    state_dir = place.state_dir
    log_path = _private_log(state_dir)
    with open(log_path, "ab") as log_file:
        start = log_file.seek(0, os.SEEK_END)  # the child's own lines follow
        child = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            env={**os.environ, DETACHED_ENV: "1"},
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        code = child.poll()
        if code is not None:
            why = _last_said(log_path, start)
            raise Failure("serve_failed", f"the coordinator exited with code {code}{': ' + why if why else ''}; see {log_path}",
                          EXIT_REFUSED if code == 1 else code)
        info = discovery.read_state(state_dir)
        if info and info.get("pid") == child.pid:
            _out(as_json, info, f"lockstep: serving {place.repo_id} (pid {child.pid}) on {info['endpoints'][0]}; log: {log_path}")
            return
        time.sleep(0.05)
    child.terminate()
    raise Failure("serve_failed", f"the coordinator did not start within 15s; see {log_path}", EXIT_REFUSED)


@main.command()
@endpoint_option
@json_option
@handle_errors
def stop(endpoint, as_json):
    """Stop this repository's coordinator cleanly (claims stay in the ledger).

    \b
    Examples:
      lockstep stop
      lockstep stop --json
    """
    place = discovery.locate()
    info = discovery.read_state(place.state_dir) or {}
    reply = ask(endpoint, m.Shutdown(reason="lockstep stop"))
    pid = info.get("pid")
    if pid and not endpoint:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and discovery.read_state(place.state_dir) is not None:
            time.sleep(0.05)
    _out(as_json, {"stopped": True, "pid": pid, "message": reply.message}, f"lockstep: {reply.message}")
