"""The integration branch's index: per path, the newest commit on it that changed it.

Pure: no git, no trio, no clock.  ``coordinator/gitrefs.py`` (the shell) feeds it the
commits it reads when the refs move, and the lags of agents' heads.

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
* Unknown is not stale: a ``HEAD`` the coordinator cannot resolve (no git, an unknown
  commit) gets no freshness verdict rather than a false block.
"""

from __future__ import annotations

import msgspec

LAG_CACHE = 4096  # (head) lags kept for the current tip


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
        self.worktree_branch: dict[str, str] = {}  # worktree top -> the branch checked out there
        # agent branch -> path -> that branch's commits touching it that the tip lacks
        self.unmerged: dict[str, dict[str, tuple[str, ...]]] = {}
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


def stale_text(path: str, change: Change, branch: str) -> str:
    """The one sentence an agent (or its model) reads to fix its base by itself."""
    return (
        f"stale base: {path} changed on {branch} in {change.commit[:10]} by {change.author or '?'} "
        f"({change.subject!r}); run `git merge {branch}` (or rebase) first"
    )
