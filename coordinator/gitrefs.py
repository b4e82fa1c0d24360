"""The integration branch, followed: per path, the newest commit on it that changed it.

Pure core (``IntegrationIndex``) and a small shell (``RefWatcher``).

Theory
------
* A path's base is *stale* in an agent's worktree when the integration branch (``main``)
  has a commit touching the path that the agent's ``HEAD`` does not contain.  Writing
  there now makes a merge conflict later; ``git merge main`` first avoids it.
* It is enough to know, per path, the *newest* integration commit that changed it
  (``newest``): if ``HEAD`` contains it, it contains every older one on its line.
* "Does ``HEAD`` contain commit C?" is answered from the *lag* of ``HEAD``: the set of
  integration commits not reachable from it (``git rev-list HEAD..tip``), computed once
  per (head, tip) and cached.  An agent that is up to date has an empty lag; one that
  is behind lags by the commits merged since it last synced: the cost is that, not the
  history.
* The index follows the branch by watching its ref files (``refs/heads/NAME`` and
  ``packed-refs`` in the git common dir) with ``stat``; on a change it reads only the
  new commits (``git log old..new``).  A rewritten branch (``old`` not an ancestor of
  ``new``) is read again from scratch.
* Agent branches are watched the same way (their tips are what merge holds wait for);
  a moved tip's lag is computed ahead of its next intent.
* Unknown is not stale: a ``HEAD`` the coordinator cannot resolve (no git, an unknown
  commit) gets no freshness verdict rather than a false block.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import trio

from protocol.gitrefs import packed_refs, read_ref, symbolic_head

POLL_INTERVAL = 0.1  # seconds between stats of the ref files
LAG_CACHE = 4096  # (head) lags kept for the current tip
_FORMAT = "--format=%x1e%H%x1f%an%x1f%s"


class Change(msgspec.Struct, frozen=True):
    """The newest integration commit that changed a path."""

    commit: str
    author: str
    subject: str


class IndexStatistics(msgspec.Struct, frozen=True, kw_only=True):
    branch: str
    tip: str | None
    paths: int
    commits_read: int
    updates: int
    rebuilds: int
    lags_cached: int
    lag_misses: int


class IntegrationIndex:
    """What the integration branch last changed, per path, and which heads lag it."""

    def __init__(self, branch: str) -> None:
        self.branch = branch  # refs/heads/NAME
        self.tip: str | None = None
        self.newest: dict[str, Change] = {}
        self.lags: dict[str, frozenset[str]] = {}  # head -> tip's commits not in head
        self.branches: dict[str, str] = {}  # other refs/heads/* -> their tips
        self._counts = {"commits_read": 0, "updates": 0, "rebuilds": 0, "lag_misses": 0}

    @property
    def short_name(self) -> str:
        return self.branch.removeprefix("refs/heads/")

    def advance(self, tip: str | None, commits: list[tuple[Change, list[str]]], *, rebuild: bool = False) -> None:
        """The branch moved to ``tip``; ``commits`` are the new ones, oldest first, each
        with the paths it changed (all of them, from scratch, when ``rebuild``)."""
        if rebuild:
            self.newest = {}
            self._counts["rebuilds"] += 1
        for change, paths in commits:
            for path in paths:
                self.newest[path] = change
        self._counts["commits_read"] += len(commits)
        self._counts["updates"] += 1
        if tip != self.tip:
            self.lags = {}  # lags are relative to the tip
        self.tip = tip

    def knows(self, head: str) -> bool:
        return head in self.lags or head == self.tip

    def set_lag(self, head: str, missing: frozenset[str]) -> None:
        if len(self.lags) >= LAG_CACHE:
            self.lags.pop(next(iter(self.lags)))
        self._counts["lag_misses"] += 1
        self.lags[head] = missing

    def stale(self, path: str, head: str | None) -> Change | None:
        """The integration commit changing ``path`` that ``head`` lacks, or None (fresh,
        never changed on the branch, or ``head`` unknown)."""
        change = self.newest.get(path)
        if change is None or head is None or head == self.tip:
            return None
        lag = self.lags.get(head)
        if lag is None or change.commit not in lag:
            return None
        return change

    def statistics(self) -> IndexStatistics:
        return IndexStatistics(
            branch=self.short_name, tip=self.tip, paths=len(self.newest), lags_cached=len(self.lags), **self._counts
        )


def parse_log(text: str) -> list[tuple[Change, list[str]]]:
    """Parse ``git log --name-only -z`` with ``_FORMAT`` into (change, paths)."""
    commits = []
    for chunk in text.split("\x1e"):
        if not chunk:
            continue
        header, _, rest = chunk.partition("\0")
        commit, author, subject = (header.split("\x1f") + ["", ""])[:3]
        paths = [p for p in rest.lstrip("\n").split("\0") if p]
        commits.append((Change(commit, author, subject), paths))
    return commits


def default_branch(common: str | os.PathLike) -> str:
    """The branch checked out in the main worktree, else main, else master."""
    head = symbolic_head(common)
    if head and head.startswith("refs/heads/"):
        return head
    for name in ("refs/heads/main", "refs/heads/master"):
        if read_ref(common, name):
            return name
    return "refs/heads/main"


def branch_ref(name: str) -> str:
    return name if name.startswith("refs/") else f"refs/heads/{name}"


class RefWatcher:
    """The shell: stats the ref files, runs git only when they changed."""

    def __init__(self, common: str | os.PathLike, branch: str | None = None) -> None:
        self.common = Path(common)
        self.index = IntegrationIndex(branch_ref(branch) if branch else default_branch(self.common))
        self._stamp: tuple | None = None
        self._lock = trio.Lock()  # one git conversation at a time: the index moves in order

    async def _git(self, *args: str, check: bool = True) -> trio.CompletedProcess:
        return await trio.run_process(
            ["git", f"--git-dir={self.common}", "-c", "core.quotePath=false", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=check,
        )

    def _stat_refs(self) -> tuple:
        """Cheap fingerprint of every branch ref: the loose files and packed-refs."""
        stamp = []
        for path in (self.common / "packed-refs",):
            try:
                st = path.stat()
                stamp.append((str(path), st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamp.append((str(path), None))
        stack = [self.common / "refs" / "heads"]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                else:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    stamp.append((entry.path, st.st_mtime_ns, st.st_size, st.st_ino))
        stamp.sort(key=lambda item: item[0])
        return tuple(stamp)

    def _read_branches(self) -> dict[str, str]:
        refs = {name: commit for name, commit in packed_refs(self.common).items() if name.startswith("refs/heads/")}
        base = self.common / "refs" / "heads"
        for root, _dirs, files in os.walk(base):
            for file in files:
                name = "refs/heads/" + str(Path(root, file).relative_to(base)).replace(os.sep, "/")
                commit = read_ref(self.common, name)
                if commit:
                    refs[name] = commit
        return refs

    async def sync(self) -> list[str]:
        """Catch up with the refs if their files changed; -> the branches that moved.
        Costs one ``stat`` per ref file when nothing changed."""
        async with self._lock:
            return await self._sync()

    async def _sync(self) -> list[str]:
        stamp = self._stat_refs()
        if stamp == self._stamp:
            return []
        self._stamp = stamp
        index = self.index
        refs = self._read_branches()
        tip = refs.get(index.branch)
        moved = [name for name, commit in refs.items() if index.branches.get(name) != commit]
        moved += [name for name in index.branches if name not in refs]
        if tip != index.tip:
            await self._follow(index.tip, tip)
        index.branches = refs
        return moved

    async def _follow(self, old: str | None, new: str | None) -> None:
        index = self.index
        if new is None:
            index.advance(None, [], rebuild=True)
            return
        rebuild = old is None or (await self._git("merge-base", "--is-ancestor", old, new, check=False)).returncode != 0
        span = new if rebuild else f"{old}..{new}"
        out = await self._git("log", "--no-renames", "--name-only", "-z", _FORMAT, "--reverse", "--topo-order", span)
        index.advance(new, parse_log(out.stdout.decode("utf-8", "surrogateescape")), rebuild=rebuild)

    async def ensure_lag(self, head: str) -> None:
        """Know ``head``'s lag behind the tip (one ``git rev-list`` on a cache miss)."""
        async with self._lock:
            await self._ensure_lag(head)

    async def _ensure_lag(self, head: str) -> None:
        index = self.index
        if index.tip is None or index.knows(head):
            return
        out = await self._git("rev-list", f"{head}..{index.tip}", check=False)
        if out.returncode != 0:  # not a commit of this repository: unknown, never stale
            index.set_lag(head, frozenset())
            return
        index.set_lag(head, frozenset(out.stdout.decode().split()))

    async def watch(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Follow the refs forever; warm the lag of every branch tip that moved."""
        await self.sync()
        task_status.started()
        while True:
            await trio.sleep(POLL_INTERVAL)
            for name in await self.sync():
                commit = self.index.branches.get(name)
                if commit and name != self.index.branch:
                    await self.ensure_lag(commit)
