"""`lockstep claim`'s body, without click: the click command and the entry point's fast
path (``agents.cli.fast``) both run it, so both print the same bytes and exit alike."""

from __future__ import annotations

import shutil
import sys
import time

from protocol import messages as m
from protocol.errors import EXIT_REFUSED, EXIT_USAGE

from .output import (
    PID_MAX,
    Failure,
    as_agent,
    conflict_lines,
    echo,
    handle_errors,
    out,
    repo_paths,
    seconds,
)

MAX_WAIT = 86400.0  # --wait: a day; 1e308 s was taken, and its wait printed a 309-digit number of seconds


def claim_payload(reply: m.Granted | m.Refused) -> dict:
    if isinstance(reply, m.Granted):
        return {"granted": True, "token": reply.token, "patterns": reply.patterns, "conflicts": [], "warnings": reply.warnings}
    return {"granted": False, "token": None, "reason": reply.reason, "conflicts": reply.conflicts, "warnings": [], "stale": reply.stale}


class Spinner:
    """One line on a terminal's stderr, redrawn: a spinner, what we wait for, the time left."""

    FRAMES = "|/-\\"
    FRAME_S = 0.1

    def __init__(self) -> None:
        self.frame = 0

    def wait(self, seconds: float, what: str, deadline: float) -> None:
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            left = max(0.0, deadline - now)
            self.frame += 1
            width = max(20, shutil.get_terminal_size((80, 24)).columns - 1)
            line = f"{self.FRAMES[self.frame % len(self.FRAMES)]} lockstep: {what}; {left:.0f}s left"
            sys.stderr.write("\r" + line[:width] + "\x1b[K")
            sys.stderr.flush()
            if now >= end:
                return
            time.sleep(min(self.FRAME_S, end - now))

    def clear(self) -> None:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def _note_hidden_files(paths, patterns: list[str]) -> None:
    """Say so when a PATH names an existing file that, read as the glob it also is, it
    does not cover: ``claim 'app/[slug]/page.tsx'`` claims app/s/page.tsx and the like,
    not that file, which nothing then guards.  A note on stderr: the claim stands."""
    import os

    from protocol.errors import LockstepError
    from protocol.paths import Pattern, overlaps

    for path, pattern in zip(paths, patterns):
        if not set(path) & set("*?[") or not os.path.lexists(path):
            continue
        try:
            named = repo_paths([path], literal=True)[0]
        except LockstepError:
            continue
        if not overlaps(Pattern.parse(pattern), Pattern.parse(named)):
            echo(f"lockstep: note: {path} is claimed as a glob, which does not cover the file named {path}; "
                 "claim that file with --literal", err=True)


@handle_errors
def claim(paths, shared, ttl, wait, literal, agent, pid, endpoint, as_json):
    """Claim ``paths`` for ``agent`` (see `lockstep claim --help`)."""
    patterns = repo_paths(paths, literal=literal, links=True)
    if not literal:
        _note_hidden_files(paths, patterns)
    if pid is not None:
        import psutil

        if not 0 < pid <= PID_MAX or not psutil.pid_exists(pid):
            raise Failure("bad_request", f"--pid {pid}: no such process on this machine", EXIT_USAGE)
    ttl_s = None if ttl is None else seconds(ttl, "--ttl")
    wait_s = 0.0 if wait is None else seconds(wait, "--wait", most=MAX_WAIT)

    def body(session):
        deadline = time.monotonic() + wait_s
        waiting_for = None
        spinner = Spinner() if wait_s and sys.stderr.isatty() else None
        try:
            retry = False
            while True:
                reply = session.claim(patterns, shared=shared, ttl=ttl_s, retry=retry)
                retry = True  # one claim.refused in the ledger per wait, not one per retry
                left = deadline - time.monotonic()
                if isinstance(reply, m.Granted) or left <= 0:
                    return reply
                holders = ", ".join(sorted({f"{c.holder} ({c.pattern})" for c in reply.conflicts})) or reply.reason
                hint = min((c.retry_after for c in reply.conflicts if c.retry_after), default=None)
                pause = min(left, max(0.05, hint) if hint else 0.2)
                if spinner is not None:  # a terminal: who we wait for and the time left, redrawn
                    spinner.wait(pause, f"waiting for {holders}", deadline)
                    continue
                if holders != waiting_for:  # say who we wait for, once per change (stderr: stdout stays one document)
                    waiting_for = holders
                    echo(f"lockstep: waiting up to {left:.0f}s for {holders}", err=True)
                time.sleep(pause)
        finally:
            if spinner is not None:
                spinner.clear()

    reply = as_agent(agent, endpoint, pid, body)
    payload = claim_payload(reply)
    if isinstance(reply, m.Granted):
        text = f"granted {', '.join(reply.patterns)} (token {reply.token})"
        if reply.warnings:
            text += "\nwarnings:\n" + conflict_lines(reply.warnings)
        out(as_json, payload, text)
        return
    out(as_json, payload, f"refused: {reply.reason}")
    sys.exit(EXIT_REFUSED)
