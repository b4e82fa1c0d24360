"""Every write under ``lockstep run``: the agent's worktree is watched and each write is
reported to the coordinator as it happens, hooks or not.

A write is any file created, changed or deleted in the worktree, outside ``.git``, not
ignored by git, and left differing from the commit (a file rewritten with its committed
bytes, or put back, is no write: ``_differing``).  Writes are gathered in short bursts (``DEBOUNCE_MS``: a formatter
rewriting 200 files is one report) and each burst is reported as writes made after the
fact (``wrote``, as the hooks' after-call comparison reports them), decided by the
intent gate: a free file is claimed for the agent (as an announced write would be), and
a file another agent holds is a ``write.unannounced`` event, recorded and published
with its holders (beside the gate's ``intent.decided``) within the burst window — so a
conflict is visible in ``status``, ``top`` and the ledger in well under a second even
for an agent with no hooks.  The free files of a burst that also wrote a held one are
claimed all the same, in every mode.

Limits, said where they apply:

* Writes cannot be told apart by process: when another live agent works in the same
  worktree, writes are not reported at all (they might be the other agent's).  Hooks,
  which see each tool call, still attribute them.
* Writes made in the last moments before the command exits are collected for ``DRAIN``
  seconds after it exits; the git guard sees anything later.
* The filesystem watcher is ``watchfiles`` (inotify on Linux, FSEvents, ReadDirectoryChanges);
  on a filesystem that sends no events (some network mounts) set ``WATCHFILES_FORCE_POLLING``.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable, Iterable

import trio
from watchfiles import Change, DefaultFilter, watch

from protocol import messages as m
from protocol.discovery import locate
from protocol.errors import PeerError
from protocol.paths import Pattern, canonical, escape, overlaps

from .client import AgentSession, CoordinatorUnreachable, RequestFailed, stderr_notice

SOURCE = "run watcher"  # what saw the writes, in the ``write.unannounced`` record
DEBOUNCE_MS = 300  # a burst of writes is reported at most this long after its first write...
STEP_MS = 30  # ...or as soon as the worktree has been quiet this long
DRAIN = 0.3  # seconds after the command exits during which writes it made are still collected
IGNORE_CACHE = 50_000  # paths whose ignore verdict is remembered
STATUS_LIMIT = 2_000  # files of a burst checked against the commit in one git call (else all reported)
SHARED_RECHECK = 2.0  # seconds a "who else works in this worktree" answer is trusted
MAX_RESTARTS = 20  # times the watch is set up again after it failed, per run


class SessionNotices:
    """The session's notices for ``open_agent``, held back while the watcher drains after
    the command exited: the coordinator ended the session with the command, so renewing
    it to send the last reports is expected, not news."""

    def __init__(self, say: Callable[[str], None] = stderr_notice) -> None:
        self.say = say
        self.quiet = False

    def __call__(self, text: str) -> None:
        if not self.quiet:
            self.say(text)


class _Stop:
    """watchfiles' stop event, read by its thread every ``STEP_MS``: the first read means
    the watch is armed; after ``drain`` the watch stops (writes already made are in)."""

    def __init__(self) -> None:
        self._at: float | None = None
        self.armed = threading.Event()
        self.on_armed: Callable[[], None] | None = None  # called once when (re)armed

    def is_set(self) -> bool:
        if not self.armed.is_set():
            self.armed.set()
            if self.on_armed is not None:
                self.on_armed()
        return self._at is not None and time.monotonic() >= self._at

    def set(self, drain: float = 0.0) -> None:
        at = time.monotonic() + drain
        self._at = at if self._at is None else min(self._at, at)


class WriteReporter:
    """Reports the writes of one worktree as ``agent``'s writes after the fact."""

    def __init__(self, agent: AgentSession, worktree: Path, notice: Callable[[str], None] = stderr_notice) -> None:
        self.agent = agent
        self.worktree = worktree.resolve()
        self.notice = notice
        self.reported = 0  # writes reported (for tests and the summary)
        self.conflicts = 0  # writes to a path another agent holds
        self._shared: tuple[float, list[str]] | None = None
        self._said: set[str] = set()
        self._ignored: dict[str, bool] = {}  # path -> git ignores it (see _not_ignored)

    # ------------------------------------------------------------------ watching

    async def watch(self, stop: _Stop, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Watch until ``stop`` is set; ``task_status.started()`` once the watch is armed
        (or could not be: then the command runs unwatched, and we say so)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_in_thread, stop)
            await trio.to_thread.run_sync(stop.armed.wait, abandon_on_cancel=True)
            task_status.started()

    async def _watch_in_thread(self, stop: _Stop) -> None:
        token = trio.lowlevel.current_trio_token()
        failures: list[Exception] = []

        def say(text: str) -> None:  # from the watch thread
            try:
                trio.from_thread.run_sync(self.notice, text, trio_token=token)
            except trio.RunFinishedError:
                pass

        def in_thread() -> None:
            restarts = 0
            try:
                while True:
                    try:
                        batches = watch(
                            self.worktree,
                            watch_filter=self._outside_git,
                            debounce=DEBOUNCE_MS,
                            step=STEP_MS,
                            stop_event=stop,
                            rust_timeout=1000,
                            ignore_permission_denied=True,
                        )
                        for batch in batches:
                            trio.from_thread.run(self._report_or_say, batch, trio_token=token)
                        return  # stopped
                    except trio.RunFinishedError:
                        return
                    except Exception as exc:  # the OS refused the watch (the inotify limit), or a name it cannot read
                        if not stop.armed.is_set() or restarts >= MAX_RESTARTS:
                            failures.append(exc)
                            return
                        restarts += 1  # e.g. a file named in bytes that are not UTF-8: that burst is lost, not the watch
                        stop.armed.clear()
                        stop.on_armed = lambda exc=exc: say(f"the watch of {self.worktree} failed ({exc}); the writes of that moment are not reported; watching again")
            finally:
                stop.armed.set()

        try:
            await trio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
        finally:
            stop.set()  # an abandoned thread ends within a step
        for exc in failures:
            self.notice(f"cannot watch {self.worktree} ({exc}): writes under run are not reported; hooks and the git guard still check them")

    async def _report_or_say(self, batch) -> None:
        """One burst; a failure to report it is said, and the watch goes on."""
        try:
            await self.report(batch)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop the command's watch
            self.notice(f"could not report writes ({type(exc).__name__}: {exc}); still watching")

    def _outside_git(self, change, path: str) -> bool:
        """Not in ``.git``, and not scratch every tool leaves (see ``_scratch``)."""
        relative = os.path.relpath(path, self.worktree)
        return not relative.startswith("..") and not _scratch(relative)

    # ------------------------------------------------------------------ reporting

    async def report(self, changes: Iterable[tuple[int, str]]) -> None:
        """Report one burst of writes (watchfiles' ``(Change, absolute path)``) as writes after the fact."""
        files, new_folders = await trio.to_thread.run_sync(self._sorted, list(changes))
        if new_folders:
            watched = await self._not_ignored([folder + "/" for folder in new_folders])
            files += await trio.to_thread.run_sync(self._files_in, watched)
        files = await self._differing(await self._not_ignored(sorted(set(files))))
        patterns = []
        for path in files:
            try:
                path.encode()  # a name that is not UTF-8 cannot go on the wire
                patterns.append(canonical(escape(path)))
            except UnicodeEncodeError:
                self._say_once(path, f"a write to {path!r} cannot be reported: the name is not UTF-8")
            except PeerError as exc:
                self._say_once(path, f"a write to {path!r} cannot be reported: {exc.message}")
        if not patterns:
            return
        try:
            if await self._shared_worktree():
                return
            self._account(patterns, await self.agent.wrote(patterns, source=SOURCE))
        except (CoordinatorUnreachable, RequestFailed) as exc:
            self.notice(f"writes to {', '.join(patterns[:3])}{' ...' if len(patterns) > 3 else ''} not reported: {exc}")

    def _sorted(self, changes: list[tuple[int, str]]) -> tuple[list[str], list[str]]:
        """(files written, folders created), relative to the worktree.  A folder appearing
        is not itself a write, but the files in it are (see ``_files_in``)."""
        files, folders = [], []
        for change, path in changes:
            if os.path.islink(path) or not os.path.isdir(path):  # a link, even to a folder, is a file of its own
                files.append(self._relative(path))
            elif change == Change.added:
                folders.append(self._relative(path))
        return files, folders

    def _files_in(self, folders: list[str]) -> list[str]:
        """The files in new folders: one written before the watcher could watch its new
        folder (inotify adds a folder only once told it exists) is found by looking."""
        found = []
        for folder in folders:
            for top, dirs, names in os.walk(self.worktree / folder):
                dirs[:] = [d for d in dirs if not _scratch(d)]
                links = [d for d in dirs if os.path.islink(os.path.join(top, d))]  # a link to a folder is a file of its own
                found.extend(self._relative(os.path.join(top, name)) for name in names + links if not _scratch(name))
        return found

    def _relative(self, path: str) -> str:
        return os.path.relpath(path, self.worktree).replace(os.sep, "/")

    def _account(self, patterns: list[str], decision: m.Decision) -> None:
        self.reported += len(patterns)
        if decision.verdict == "allow" or not decision.holders:
            return
        others = [Pattern.parse(c.pattern) for c in decision.conflicts if c.holder != self.agent.name]
        held = [p for p in patterns if any(overlaps(q, Pattern.parse(p)) for q in others)] or patterns
        self.conflicts += len(held)
        self.notice(f"wrote {', '.join(held)}, which {', '.join(decision.holders)} holds: {decision.reason}")

    async def _not_ignored(self, files: list[str]) -> list[str]:
        """``files`` less those git ignores.  Verdicts are remembered per path (an editor
        saves the same files again and again), so only paths not seen before cost a
        ``git check-ignore``, one for the whole burst; a changed ``.gitignore`` forgets
        them all."""
        if any(f == ".gitignore" or f.endswith("/.gitignore") for f in files) or len(self._ignored) > IGNORE_CACHE:
            self._ignored.clear()
        unknown = [f for f in files if f not in self._ignored]
        if unknown:
            ignored = await self._check_ignore(unknown)
            if ignored is None:  # git could not say: report them all, remember nothing
                return files
            self._ignored.update((f, f in ignored) for f in unknown)
        return [f for f in files if not self._ignored[f]]

    async def _differing(self, files: list[str]) -> list[str]:
        """``files`` less those that now hold their committed bytes (``git status`` does
        not list them): a file rewritten with the same bytes (a formatter that changed
        nothing) or put back as committed (``git checkout -- PATH``, a new file removed)
        is no write to coordinate - as for the hooks' after-call comparison.  One
        ``git status`` limited to the burst's files (literal pathspecs, no optional
        locks: the agent's own git commands run meanwhile); if git cannot say, or the
        burst is too big to name on a command line, all are reported."""
        if not files or len(files) > STATUS_LIMIT:
            return files
        try:
            done = await trio.run_process(
                ["git", "--no-optional-locks", "--literal-pathspecs", "status", "--porcelain=v1", "-z",
                 "--untracked-files=all", "--no-renames", "--", *files],
                cwd=self.worktree, capture_stdout=True, capture_stderr=True, check=False,
            )
        except OSError:
            return files
        if done.returncode != 0:
            return files
        listed = {os.fsdecode(entry[3:]) for entry in done.stdout.split(b"\0") if len(entry) > 3}
        return [f for f in files if f in listed]

    async def _check_ignore(self, files: list[str]) -> set[str] | None:
        try:
            done = await trio.run_process(
                ["git", "check-ignore", "-z", "--stdin"],
                cwd=self.worktree,
                stdin=b"".join(os.fsencode(f) + b"\0" for f in files),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        except OSError:
            return None
        if done.returncode not in (0, 1):  # 1: nothing ignored
            return None
        return set(map(os.fsdecode, done.stdout.split(b"\0")))

    async def _shared_worktree(self) -> bool:
        """Is another live agent working in this worktree?  (Then a write may be theirs.)"""
        now = time.monotonic()
        if self._shared is None or now - self._shared[0] > SHARED_RECHECK:
            status = await self.agent.status()
            others = sorted(
                a.name
                for a in status.agents
                if a.state == "alive" and a.name != self.agent.name and a.worktree and Path(a.worktree).resolve() == self.worktree
            )
            self._shared = (now, others)
        others = self._shared[1]
        if others:
            self._say_once(
                "shared:" + ",".join(others),
                f"{', '.join(others)} also work(s) in {self.worktree}: writes there cannot be told apart, so they are not reported",
            )
        return bool(others)

    def _say_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.notice(text)


def _scratch(relative: str) -> bool:
    """``.git``, and what is never source even where no .gitignore says so: caches
    (``__pycache__``, ``.pytest_cache``, ``node_modules``, virtual environments), compiled
    Python and editors' swap and backup files (watchfiles' default filter, on the path
    inside the worktree).  Without this, a repository that does not ignore
    ``__pycache__`` would see every agent that runs Python claim, and then conflict
    over, its bytecode."""
    return not _NOT_SCRATCH(Change.modified, relative)


_NOT_SCRATCH = DefaultFilter()


@asynccontextmanager
async def reporting_writes(
    agent: AgentSession,
    *,
    enabled: bool = True,
    cwd: str | os.PathLike | None = None,
    notice: Callable[[str], None] = stderr_notice,
    session_notices: SessionNotices | None = None,
) -> AsyncIterator[WriteReporter | None]:
    """Watch the agent's worktree while inside (armed on entry); on exit, collect the
    writes already made for ``DRAIN`` seconds (``session_notices`` quiet), report them,
    and stop."""
    if not enabled:
        yield None
        return
    reporter = WriteReporter(agent, locate(cwd).worktree, notice)
    stop = _Stop()
    async with trio.open_nursery() as nursery:
        await nursery.start(reporter.watch, stop)
        try:
            yield reporter
        finally:
            if session_notices is not None:
                session_notices.quiet = True
            stop.set(DRAIN)
