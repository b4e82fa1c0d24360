"""CLI commands that run deterministic checks through the coordinator:
``check KIND``, ``verify``, ``done``, ``plan run``, ``plan stop`` and ``plan status``.

A check can take minutes: the coordinator answers with a job id at once, and we poll
the job, printing each result as it lands (on a terminal, a progress line too) and
exiting with the gate's verdict: 0 pass, 1 fail / block / escalate.  A slow probe is
not an unreachable coordinator: only the first answer is bound by the connect timeout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from agents.oneshot import (
    Connection,
    OneShotSession,
    expect,
    open_connection,
    open_oneshot,
    resolve_endpoint,
)
from agents.polling import Backoff
from protocol import discovery, jsontext
from protocol import messages as m
from protocol.errors import LockstepError, UsageError
from protocol.files import read_regular

from .base import (
    EXIT_REFUSED,
    EXIT_USAGE,
    INT64,
    Failure,
    agent_option,
    ask,
    endpoint_option,
    handle_errors,
    json_option,
    main,
)
from .output import plain


def _mark(result: dict) -> str:
    return click.style("✓", fg="green") if result.get("verdict") == "pass" else click.style("✗", fg="red")


def _print_result(result: dict, explain: bool = False) -> None:
    if "step" in result:  # a plan's step ended
        mark = click.style("✓", fg="green") if result.get("to_state") == "done" else "•"
        click.echo(f"  {mark} step {result['step']:<19} {result.get('to_state')}  {result.get('detail', '')}", err=True)
        return
    line = f"  {_mark(result)} {result['name']:<24} {result.get('duration', 0):6.2f}s  {result.get('target', '')}"
    about = (result.get("details") or {}).get("environment") or {}
    ran = " · ".join(str(part) for part in (about.get("tool"), about.get("version")) if part)
    if ran:
        line += click.style(f"  [{ran}]", dim=True)
    click.echo(line, err=True)
    if explain and about:
        for why in ([about["detected"]] if about.get("detected") else []) + list(about.get("why", [])):
            click.echo(f"      · {why}", err=True)


def _print_failures(results: list[dict]) -> None:
    for result in results:
        if result.get("verdict") == "pass":
            continue
        exit_code = result.get("exit_code")
        head = f"── {result['name']}: {result.get('finding')} ({result.get('reason', '')})"
        if exit_code is not None:
            head += f", exit {exit_code}"
        click.echo(click.style(head, fg="red"), err=True)
        if result.get("output"):
            click.echo(result["output"].rstrip(), err=True)
        log = (result.get("details") or {}).get("log")
        if log:
            click.echo(f"   full output: {log}", err=True)


def _follow(session_or_conn: OneShotSession | Connection, accepted: m.Reply, as_json: bool, explain: bool = False) -> m.Gate:
    """Poll the job until it finishes; show results as they come."""
    conn = session_or_conn.conn if isinstance(session_or_conn, OneShotSession) else session_or_conn
    if isinstance(accepted, m.Gate):  # decided without running (e.g. the repair bound)
        return accepted
    expect(accepted, m.Accepted)
    session = session_or_conn.session if isinstance(session_or_conn, OneShotSession) else None
    try:
        return _poll(conn, accepted, as_json, explain)
    except KeyboardInterrupt:
        by = session_or_conn.name if isinstance(session_or_conn, OneShotSession) else _who(None)
        _cancel(conn, accepted, session, by)
        raise


def _cancel(conn: Connection, accepted: m.Accepted, session: str | None, by: str) -> None:
    """Nobody waits for ``job`` any more (Ctrl-C): ask the coordinator to stop it, so its
    command does not run on to its timeout holding a probe slot (a plan stops where it
    stands, as with ``plan stop``).  Best effort, briefly: a landing refuses, and an
    unreachable coordinator must not delay the exit."""
    try:
        reason = "Ctrl-C on `lockstep plan run`" if accepted.kind == "plan" else ""
        conn.request(m.JobQuery(job=accepted.job, cancel=True, session=session, by=by, reason=reason), timeout=CANCEL_TIMEOUT)
    except (LockstepError, KeyboardInterrupt):
        pass


def _who(agent: str | None) -> str:
    """Who stops a plan, for the record: the agent named, else the user."""
    return agent or os.environ.get("USER") or "operator"


def _poll(conn: Connection, accepted: m.Accepted, as_json: bool, explain: bool) -> m.Gate:
    shown = 0
    interactive = sys.stderr.isatty() and not as_json
    backoff = Backoff()
    while True:
        reply = expect(conn.request(m.JobQuery(job=accepted.job, since=shown)), m.JobReply)
        if not as_json:
            for result in reply.results:
                _print_result(result, explain)
            if interactive and reply.gate is None:
                click.echo(f"  … job {reply.job}: {reply.done}/{reply.total or '?'} done\r", nl=False, err=True)
        shown += len(reply.results)
        if reply.gate is not None:
            return reply.gate
        backoff.pause()


CANCEL_TIMEOUT = 1.0  # seconds a Ctrl-C'd check waits for its cancel to be heard


def _finish(gate: m.Gate, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(plain(gate)))
    else:
        _print_failures(gate.results)
        for response in gate.responses:
            click.echo(f"rule: {response['action']} ({response['reason']}) → {response['outcome']}", err=True)
        click.echo(f"{gate.verdict}: {gate.reason}")
    if gate.verdict not in ("pass", "allow"):
        sys.exit(EXIT_REFUSED)


def _run_job(agent: str | None, endpoint: str | None, build, as_json: bool = False, explain: bool = False) -> m.Gate:
    """Send ``build(session_id_or_None)`` as ``agent`` (or anonymously) and follow the job."""

    if agent:
        with open_oneshot(agent, endpoint=endpoint) as session:
            accepted = session.call(lambda s: build(s))
            return _follow(session, accepted, as_json, explain)
    place = discovery.locate()
    with open_connection(resolve_endpoint(place, endpoint)) as conn:
        accepted = conn.request(build(None))
        return _follow(conn, accepted, as_json, explain)


def _check(kind: str, params: dict[str, Any], name: str | None, timeout: float | None, agent, endpoint, as_json) -> None:
    from probes.builtin import prepare
    from probes.model import ProbeError, ProbeSpec

    try:  # bad parameters (and --timeout nan, 0 or -1) are bad input (exit 2), found before anything runs
        limit = {} if timeout is None else {"timeout": timeout}
        prepare(ProbeSpec(name=name or kind, kind=kind, params={**params, **_reach(kind)}, cwd=discovery.current_directory(), **limit))
    except ProbeError as exc:
        raise Failure("bad_request", exc.message, EXIT_USAGE) from None
    probe = m.ProbeRequest(kind=kind, name=name or kind, params=params, timeout=timeout)
    gate = _run_job(agent, endpoint, lambda s: m.Check(probe=probe, cwd=discovery.current_directory(), session=s), as_json)
    _finish(gate, as_json)


def _reach(kind: str) -> dict[str, Any]:
    """What this worktree's lockstep.toml lets http probes reach (``[http]``), for the
    early refusal of a URL it does not list; the coordinator applies its own copy."""
    if kind not in ("http", "consistency"):
        return {}
    from probes.config import ConfigError, load_config

    try:
        root = discovery.locate().worktree
        return {"reach": msgspec.to_builtins(load_config(root).http.reach(root))}
    except (ConfigError, OSError, LockstepError):
        return {}  # the coordinator's answer will say what is wrong


def _inside_worktree(path: str, what: str) -> None:
    """Checks look at this worktree's files: a path outside it is bad input (exit 2)."""
    top = discovery.locate().worktree.resolve()
    target = Path(discovery.current_directory(), path).resolve()
    if target != top and top not in target.parents:
        raise Failure("bad_path", f"{what} {path} is outside this worktree ({top}): checks look at the repository's files", EXIT_USAGE)


# ---------------------------------------------------------------------- check


@main.group()
def check():
    """Run one deterministic check through the coordinator.

    The check runs in an isolated worker process, in your current directory; the
    result is recorded in the ledger and published as a gate decision. Exit 0 pass,
    1 fail (a finding is a fail), 2 bad input, 3 coordinator unreachable.
    """


def _common(fn):
    fn = click.option("--name", help="Name this check in the ledger (default: its kind).")(fn)
    fn = click.option("--timeout", type=float, metavar="S", help="Kill the check after S seconds (default 60; 0.01 to 86400).")(fn)
    fn = agent_option(fn)
    fn = endpoint_option(fn)
    fn = json_option(fn)
    return handle_errors(fn)


@check.command("write")
@click.argument("path")
@click.option("--sha256", "sha256", required=True, metavar="HEX", help="The hash the file must have.")
@_common
def check_write(path, sha256, name, timeout, agent, endpoint, as_json):
    """Read PATH back and compare its SHA-256 with HEX ("write lost" if different).

    \b
    Examples:
      lockstep check write src/app.py --sha256 "$(sha256sum src/app.py | cut -d' ' -f1)"
      lockstep check write build/out.bin --sha256 HEX --agent bob --json
    """
    _inside_worktree(path, "PATH")
    _check("write", {"path": path, "sha256": sha256}, name, timeout, agent, endpoint, as_json)


@check.command("build")
@click.argument("directory")
@click.option("--pattern", default="*", show_default=True, help="Only artifacts whose name matches this glob.")
@_common
def check_build(directory, pattern, name, timeout, agent, endpoint, as_json):
    """The newest artifact in DIRECTORY must differ from the last recorded build
    ("build produced nothing" otherwise).

    \b
    Examples:
      lockstep check build dist/
      lockstep check build target/release --pattern 'myapp*' --json
    """
    _inside_worktree(directory, "DIRECTORY")
    _check("build", {"dir": directory, "pattern": pattern}, name, timeout, agent, endpoint, as_json)


@check.command("command", context_settings={"ignore_unknown_options": True})
@click.option("--expect-exit", type=INT64, default=0, show_default=True, help="The exit code that means success.")
@click.option("--creates", metavar="PATH", help="A file the command must create or change.")
@_common
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def check_command(expect_exit, creates, name, timeout, agent, endpoint, as_json, argv):
    """Run -- CMD ARGS...: its exit code is the verdict; stderr is captured on failure;
    --creates confirms the side effect.

    \b
    Examples:
      lockstep check command -- make lint
      lockstep check command --creates out/report.html -- ./gen-report
      lockstep check command --expect-exit 1 --json -- grep -q TODO src/app.py
    """
    params = {"argv": list(argv), "expect_exit": expect_exit}
    if creates:
        params["creates"] = creates
    _check("command", params, name, timeout, agent, endpoint, as_json)


@check.command("http")
@click.argument("url")
@click.option("--status", type=INT64, default=200, show_default=True, help="Expected HTTP status.")
@click.option("--contains", metavar="TEXT", help="The body must contain TEXT.")
@click.option("--json-path", metavar="EXPR", help="A JSONPath such as $.hash into the JSON body.")
@click.option("--equals", metavar="VALUE", help="With --json-path: the value there must equal VALUE (JSON, else text).")
@click.option("--at-least", type=float, metavar="N", help="With --json-path: the number there must be at least N.")
@click.option("--expect-hash-of", metavar="FILE", help="The value at --json-path (else the body) must be FILE's sha256.")
@click.option("--deploy", is_flag=True, help="What URL serves is a deploy: a new hash is recorded (deploy.seen); implied by --expect-hash-of.")
@_common
def check_http(url, status, contains, json_path, equals, at_least, expect_hash_of, deploy, name, timeout, agent, endpoint, as_json):
    """Fetch URL (loopback, or listed in [http] allow) and check status, body and a JSON value
    (a deploy verifier: the asset exists, index.html names the new bundle, deploy-info
    reports the new hash).

    \b
    Examples:
      lockstep check http http://127.0.0.1:8000/health
      lockstep check http http://127.0.0.1:8000/deploy-info --json-path '$.hash' --expect-hash-of dist/app.js
    """
    params: dict[str, Any] = {"url": url, "status": status}
    if contains is not None:
        params["contains"] = contains
    if (equals is not None or at_least is not None) and not json_path:
        raise Failure("bad_request", "--equals and --at-least need --json-path", EXIT_USAGE)
    if json_path:
        params["json_path"] = json_path
    if equals is not None:
        try:
            params["equals"] = jsontext.loads(equals)
        except ValueError:
            params["equals"] = equals
    if at_least is not None:
        params["at_least"] = at_least
    if expect_hash_of:
        params["expect_hash_of"] = expect_hash_of
    if deploy:
        params["deploy"] = True
    _check("http", params, name, timeout, agent, endpoint, as_json)


@check.command("processes")
@click.option("--match", "pattern", required=True, metavar="PATTERN", help="Matched against process names and command lines.")
@click.option("--count", type=INT64, required=True, metavar="N", help="How many must be running.")
@click.option("--exact", is_flag=True, help="Exactly N, not at least N.")
@_common
def check_processes(pattern, count, exact, name, timeout, agent, endpoint, as_json):
    """At least N processes matching PATTERN are running; the finding names what is missing.

    \b
    Examples:
      lockstep check processes --match 'uvicorn app:api' --count 1
      lockstep check processes --match worker --count 4 --exact --json
    """
    params = {"match": pattern, "count": count, "exact": exact, "exclude_pids": [os.getpid()]}
    _check("processes", params, name, timeout, agent, endpoint, as_json)


@check.command("handoff")
@click.argument("file")
@click.option("--threshold", type=INT64, default=85, show_default=True, help="Minimum score (0-100) to pass.")
@_common
def check_handoff(file, threshold, name, timeout, agent, endpoint, as_json):
    """Score a handoff document with the deterministic rubric (docs/handoff.md) and
    check what it says against what Lockstep and git know of the agent (--agent): the
    files it lists as changed, the commits and paths it cites, the tests it says pass
    (in the agent's last verify run), the paths of its next step. Below the threshold,
    or with a false fact, it fails and names each gap and false fact.

    \b
    Examples:
      lockstep check handoff HANDOFF.md --agent bob
      lockstep check handoff notes/handoff.md --threshold 70 --json
    """
    _check("handoff", {"path": file, "threshold": threshold}, name, timeout, agent, endpoint, as_json)


@check.command("consistency")
@click.argument("sources", nargs=-1, required=True)
@click.option("--json-path", metavar="EXPR", help="Compare the value at this JSONPath ($.version) of each body or file.")
@click.option("--header", metavar="NAME", help="Else compare this response header of each URL (ETag, X-Build).")
@_common
def check_consistency(sources, json_path, header, name, timeout, agent, endpoint, as_json):
    """Two or more SOURCES (URLs as for `check http`, and/or files) give the same value: a JSON value,
    a header, or else the same content (sha256). Fails with `values disagree`, naming
    the odd ones out and the majority value.

    \b
    Examples:
      lockstep check consistency http://127.0.0.1:8001/info http://127.0.0.1:8002/info --json-path '$.version'
      lockstep check consistency deploy/a/app.toml deploy/b/app.toml --json
    """
    params: dict[str, Any] = {"sources": list(sources)}
    if json_path:
        params["json_path"] = json_path
    if header:
        params["header"] = header
    _check("consistency", params, name, timeout, agent, endpoint, as_json)


@check.command("bundle")
@click.option("--url", metavar="URL", help="Only the deploys seen at URL (default: every URL, each on its own).")
@click.option("--window", default="1h", show_default=True, metavar="DURATION", help="Judge the deploys seen this recently.")
@click.option("--max-size", metavar="SIZE", help="Size budget of a bundle: bytes, or 250KB, 1.5MB, 64KiB.")
@_common
def check_bundle(url, window, max_size, name, timeout, agent, endpoint, as_json):
    """The recorded deploys (deploy.seen) move forward: none in the window served an
    older bundle than one before it (`bundle rolled back`), and, with --max-size,
    none is over the budget (`bundle too large`).

    \b
    Examples:
      lockstep check bundle --url http://127.0.0.2:8000/app.js
      lockstep check bundle --window 30m --max-size 500KB --json
    """
    from probes.schema import Bytes, PositiveSeconds, dec_hook

    try:
        params: dict[str, Any] = {"window": float(msgspec.convert(window, PositiveSeconds, dec_hook=dec_hook))}
        if max_size is not None:
            params["max_size"] = int(msgspec.convert(int(max_size) if max_size.isdigit() else max_size, Bytes, dec_hook=dec_hook))
    except msgspec.ValidationError as exc:
        raise Failure("bad_request", str(exc), EXIT_USAGE) from None
    if url:
        params["url"] = url
    _check("bundle", params, name, timeout, agent, endpoint, as_json)


# ---------------------------------------------------------------------- verify / done


@main.command()
@click.option("--new-turn", is_flag=True, help="Start a new agent turn: the repair-loop count starts again.")
@click.option("--full", "full_job", metavar="JOB", help="Print the whole output kept for each check of job JOB, run nothing.")
@click.option("--explain", is_flag=True, help="Say, under each check, why it was chosen and where it ran (venv, PYTHONPATH, env).")
@agent_option
@endpoint_option
@json_option
@handle_errors
def verify(new_turn, full_job, explain, agent, endpoint, as_json):
    """Run the project's verify suite through the coordinator.

    Checks come from [checks.NAME] in lockstep.toml (else detected from package.json,
    Cargo.toml, pyproject.toml); read-only ones run in parallel, autofix ones after,
    one at a time. Prints each check (✓/✗, duration, the tool and version that ran)
    and the errors-first output of failures. Checks run in the project's environment
    (its venv; the worktree's sources first), with LOCKSTEP_AGENT and
    LOCKSTEP_WORKTREE set; --explain (or --json, under details.environment) says why. Exit 0 only if all pass. With --agent the run counts for that agent's
    `done` gate and repair loop; after max_repair_loops failing rounds the failure
    report stands and nothing re-runs (exit 1). With --agent, content that already
    passed for that agent (the same git tree of the worktree's files) answers at
    once from the ledger and says so. The whole output of every check is
    kept in the state directory (its path is in the report); --full JOB prints it.

    \b
    Examples:
      lockstep verify --agent bob
      lockstep verify --agent bob --new-turn
      lockstep verify --json | jq '.results[] | select(.verdict != "pass")'
    """
    if full_job is not None:
        _print_full(full_job, as_json)
        return
    from probes.config import load_config

    load_config(discovery.locate().worktree)  # a broken lockstep.toml is bad input (exit 2), not a failed run
    venv = os.environ.get("VIRTUAL_ENV", "")  # the venv active here is the one checks use
    tree = _content()[0] if agent else ""  # content that already passed answers at once
    gate = _run_job(agent, endpoint, lambda s: m.Verify(cwd=discovery.current_directory(), session=s, new_turn=new_turn, venv=venv, tree=tree), as_json, explain)
    _finish(gate, as_json)


def _content() -> tuple[str, str]:
    """(content id, HEAD's tree) of this worktree; ("", "") when git cannot say (the
    gates then fall back to announced writes alone)."""
    from protocol.content import ContentError, content_id, head_tree

    top = discovery.locate().worktree
    try:
        return content_id(top), head_tree(top)
    except ContentError:
        return "", ""


def _print_full(job: str, as_json: bool) -> None:
    """The kept output of each check of ``job`` (read from the state directory: works
    with the coordinator down)."""
    from probes import checklogs

    logs = checklogs.job_logs(discovery.locate().state_dir, job)
    if not logs:
        raise Failure("no_output", f"no output kept for job {job!r}: no such job, or it is older than what is kept", EXIT_REFUSED)
    if as_json:
        kept = [{"check": p.stem, "path": str(p), "output": p.read_text(errors="replace")} for p in logs]
        click.echo(json.dumps({"job": job, "checks": kept}))
        return
    out = click.get_binary_stream("stdout")
    for path in logs:
        click.echo(click.style(f"── {path.stem} ({path})", bold=True))
        sys.stdout.flush()
        with open(path, "rb") as file:  # as the command wrote it, whatever its size
            while chunk := file.read(1 << 16):
                out.write(chunk)
        out.flush()


@main.command()
@agent_option
@endpoint_option
@json_option
@handle_errors
def done(agent, endpoint, as_json):
    """Declare the agent's goal finished: passes (exit 0) only if a verify run that
    started after its last write intent passed on the worktree's content as it is now
    (an edit nobody announced blocks too), and, under [handoff] required, its handoff
    note passed `lockstep check handoff` since; otherwise blocked (exit 1), with why.

    \b
    Examples:
      lockstep done --agent bob
      lockstep done --agent bob --json | jq -r .reason
    """
    from .base import _need_agent

    name = _need_agent(agent)

    tree, head = _content()
    with open_oneshot(name, endpoint=endpoint) as session:
        gate = session.call(lambda s: m.Done(session=s, tree=tree, head_tree=head))
    _finish(gate, as_json)


# ---------------------------------------------------------------------- plans


@main.group()
def plan():
    """Run deterministic plans (PLAN.toml) and see where they stand."""


@plan.command("run")
@click.argument("plan_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--detach", is_flag=True, help="Return once the plan has started; follow it with `lockstep plan status`.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def plan_run(plan_file, detach, agent, endpoint, as_json):
    """Run PLAN_FILE through the coordinator: steps in order, each with pre-probes,
    a command or an expected agent action, and post-probes; failures skip, retry,
    roll back the previous step or escalate, as each step says. Every transition is
    a ledger event; an interrupted plan resumes when the coordinator restarts.
    Ctrl-C stops the plan on the coordinator, as `lockstep plan stop` does (exit 130).
    Exit 0 if the plan succeeded, 1 if it failed, escalated or was stopped.

    \b
    Examples:
      lockstep plan run PLAN.toml
      lockstep plan run release.toml --detach --json
    """
    from probes.config import CONFIG_LIMIT
    from probes.plan import Plan

    try:
        text = read_regular(plan_file, CONFIG_LIMIT).decode()
    except OSError as exc:  # a FIFO, a device, far too big
        raise UsageError(f"{plan_file}: cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{plan_file}: not UTF-8 text ({exc})") from None
    Plan.parse(text, plan_file)  # bad input is exit 2 before anything runs
    build = lambda s: m.PlanRun(plan=text, source=str(Path(plan_file).resolve()), cwd=discovery.current_directory(), session=s)  # noqa: E731
    if detach:
        accepted = ask(endpoint, build(None))
        click.echo(json.dumps({"job": accepted.job}) if as_json else f"plan started: job {accepted.job}")
        return
    _finish(_run_job(agent, endpoint, build, as_json), as_json)


STOP_WAIT = 60.0  # seconds `plan stop` waits for the plan's step to end (SIGTERM, then SIGKILL)


@plan.command("stop")
@click.argument("name")
@click.option("--reason", default="", help="Why, for the ledger's plan.stopped record.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def plan_stop(name, reason, agent, endpoint, as_json):
    """Stop the running plan NAME (its [plan] name, or its job id from `lockstep
    plan status`), wherever it was started: the running step's command is ended with
    its whole process group, no further step starts and nothing is rolled back (a
    stop is no failure of the step). The ledger records plan.stopped (who, why); a
    stopped plan is not resumed when the coordinator restarts. Waits until the plan
    has stopped. Exit 0 stopped, 1 no such running plan (or several by that name:
    name it by its job id), 3 coordinator unreachable.

    \b
    Examples:
      lockstep plan stop release-1.4 --reason 'wrong tag'
      lockstep plan stop 3.12 --json
    """
    import time

    by = _who(agent)
    place = discovery.locate()
    with open_connection(resolve_endpoint(place, endpoint)) as conn:
        reply = expect(conn.request(m.JobQuery(job=name, stop=True, by=by, reason=reason or "stopped with `lockstep plan stop`")), m.JobReply)
        deadline = time.monotonic() + STOP_WAIT
        backoff = Backoff()
        while reply.gate is None:
            if time.monotonic() > deadline:
                raise Failure("refused", f"plan {name} (job {reply.job}) was asked to stop but had not after {STOP_WAIT:g} s: see `lockstep plan status {reply.job}`", EXIT_REFUSED)
            backoff.pause()
            reply = expect(conn.request(m.JobQuery(job=reply.job)), m.JobReply)
    if not reply.stopped:  # it ended on its own before the stop reached it
        raise Failure("not_found", f"plan {name} (job {reply.job}) ended on its own before it could be stopped: {reply.gate.verdict}: {reply.gate.reason}", EXIT_REFUSED)
    if as_json:
        click.echo(json.dumps({"job": reply.job, "state": "stopped", "reason": reply.gate.reason}))
    else:
        click.echo(f"stopped: {reply.gate.reason} (job {reply.job})")


@plan.command("status")
@click.argument("job", required=False)
@json_option
@handle_errors
def plan_status(job, as_json):
    """Where each plan stands (read from the ledger; works with the coordinator down),
    and what a running plan's step waits for and how to satisfy it.

    \b
    Examples:
      lockstep plan status
      lockstep plan status 3.12 --json
    """
    from agents.plan_status import plan_summaries
    from ledger import LedgerMissing, open_readonly

    path = discovery.locate().state_dir / discovery.LEDGER_FILE
    try:
        reader = open_readonly(path)
    except LedgerMissing:
        raise Failure("no_ledger", f"no ledger at {path}: no coordinator has served this repository yet", EXIT_REFUSED) from None
    with reader:
        summaries = plan_summaries(reader, job)
    if job is not None and not summaries:  # as `tasks take` says of an unknown task; "no plans yet" was untrue
        raise Failure("not_found", f"no plan {job}: `lockstep plan status` lists them", EXIT_REFUSED)
    if as_json:
        click.echo(json.dumps(summaries))
        return
    if not summaries:
        click.echo("no plans yet")
    for s in summaries:
        click.echo(f"{s['job']:<8} {s['name']:<20} {s['state']:<10} {s['source']}")
        if s.get("reason"):
            click.echo(f"  {s['state']}: {s['reason']}")
        for step in s["steps"]:
            click.echo(f"    {step['id']:<16} {step['state']:<14} {step.get('detail', '')}")
        if s.get("waits_for"):
            click.echo(f"  step {s['current']} waits for {s['waits_for']['what']}")
            click.echo(f"    to go on: {s['waits_for']['how']}")

