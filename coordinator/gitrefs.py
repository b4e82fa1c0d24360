"""The shell around the integration index: follows the refs, runs git only when they move.

* The branch is followed by watching its ref files (``refs/heads/NAME`` and
  ``packed-refs`` in the git common dir) with ``stat``; on a change only the new
  commits are read (``git log old..new``).  A rewritten branch (``old`` not an ancestor
  of ``new``) is read again from scratch.
* Agent branches are watched the same way (their tips are what merge holds wait for);
  a moved tip's lag is computed ahead of its next intent.
* A head's lag is one ``git rev-list HEAD..tip`` on a cache miss (see integration.py).
* For merge holds: which branch each worktree has checked out (read from the files
  under ``worktrees/``; a removed worktree's branch is remembered while it exists), and per agent branch the paths its commits touch that main
  lacks (``git log tip..branch``) and whose content on main differs from the branch's
  (``git diff-tree tip branch``), recomputed when that branch moves, or when main
  moves for the branches that had some.  When main moves, a hold whose commits did
  not reach it but whose file main now has as the branch has it (a squash or rebase
  merge) is reported too (``same_on_tip``).
* Every git call has a deadline (``[land] git_timeout``, ``landgit.Git``: git in a
  process group of its own, ended with whatever it started).  A git that hangs (a
  lock, a slow file system) is ended at its deadline and logged; the index stays as
  it was (unknown is never a block) and the watcher tries again.  Meanwhile requests
  do not queue behind the retry: they are judged on the index as it is.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import trio

from protocol.gitrefs import is_commit_id, packed_refs, read_ref, symbolic_head

from .integration import IntegrationIndex, parse_log
from .landgit import GIT_TIMEOUT, Git, GitFailed, GitTimedOut

POLL_INTERVAL = 0.1  # seconds between stats of the ref files
RETRY_INTERVAL = 1.0  # seconds between tries of a git that timed out
log = logging.getLogger("lockstep")
_FORMAT = "--format=%x1e%H%x1f%an%x1f%s"


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

    def __init__(self, common: str | os.PathLike, branch: str | None = None, timeout: float = GIT_TIMEOUT) -> None:
        self.common = Path(common)
        self.index = IntegrationIndex(branch_ref(branch) if branch else default_branch(self.common))
        self._stamp: tuple | None = None
        self._lock = trio.Lock()  # one git conversation at a time: the index moves in order
        self._runner = Git(self.common, timeout)
        self.timed_out: str | None = None  # what last timed out, until a sync succeeds

    async def _git(self, *args: str, check: bool = True) -> trio.CompletedProcess:
        return await self._runner.run(*args, check=check)

    def _left_to_the_watcher(self, retry: bool) -> bool:
        """A git timed out: only the watcher tries again (``retry``).  A request does not
        run a git that may hang up to its deadline again, nor wait for the watcher's
        try: it is judged on the index as it is."""
        return self.timed_out is not None and not retry

    def _timed_out(self, what: str, exc: Exception) -> None:
        self.timed_out = what
        self._stamp = None  # the next poll reads the refs again
        log.warning("%s: %s; trying again", what, exc)

    def _stat_refs(self) -> tuple:
        """Cheap fingerprint of every branch ref (the loose files and packed-refs) and of
        every worktree's HEAD (which branch it has checked out).  Plain strings and
        ``os`` calls: it runs before every batch with a release, and pathlib's objects
        cost more than the stats themselves."""
        common = str(self.common)
        stamp = []
        heads = [os.path.join(common, "HEAD"), *(os.path.join(d, "HEAD") for d in _subdirs(os.path.join(common, "worktrees")))]
        for path in (os.path.join(common, "packed-refs"), *heads):
            try:
                st = os.stat(path)
                stamp.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                stamp.append((path, None))
        stack = [os.path.join(common, "refs", "heads")]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
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

    async def sync(self, *, retry: bool = False) -> list[str]:
        """Catch up with the refs if their files changed; -> the branches that moved.
        Costs one ``stat`` per ref file when nothing changed.  ``retry``: the watcher's
        call, which tries again after a git that timed out."""
        if self._left_to_the_watcher(retry):
            return []
        async with self._lock:
            try:
                moved = await self._sync()
            except GitTimedOut as exc:
                self._timed_out(f"could not follow {self.index.branch}", exc)
                return []
            except (OSError, subprocess.CalledProcessError, GitFailed) as exc:
                # git missing or failing: the index stays as it was (no false blocks);
                # the next change of the ref files tries again.
                log.warning("could not follow %s: %s", self.index.branch, _why(exc))
                return []
            if self.timed_out is not None:
                log.info("following %s again (%s had timed out)", self.index.branch, self.timed_out)
                self.timed_out = None
            return moved

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
        checked_out = self._worktree_branches()
        # A worktree removed (`git worktree remove`) before its agent's session ended
        # leaves the agent's commits on its branch: the branch is remembered for as long
        # as it exists, so the session's end still holds what main lacks.
        for top, branch in index.worktree_branch.items():
            if top not in checked_out and branch in refs and branch != index.branch:
                checked_out[top] = branch
        index.worktree_branch = checked_out
        main_moved = index.branch in moved
        for name in refs:
            if name != index.branch and (name in moved or (main_moved and index.unmerged.get(name))):
                await self._read_unmerged(name)
        # A worktree on a detached HEAD commits on no branch: its commit stands for one
        # (a release there holds what that commit has beyond main, as on a branch).
        detached = {head for head in index.worktree_branch.values() if is_commit_id(head) and head != tip}
        for head in detached:
            if head not in index.unmerged or (main_moved and index.unmerged[head]):
                await self._read_unmerged(head)
        for name in [n for n in index.unmerged if n not in refs and n not in detached]:
            del index.unmerged[name]
        # Last: a sync cut short by a git past its deadline compares with the old tips
        # again at its next try, so it reads again what it had not finished reading.
        index.branches = refs
        return moved

    def _worktree_branches(self) -> dict[str, str]:
        """Worktree top (resolved) -> the branch it has checked out, or the commit id of
        its detached HEAD."""
        found = {}
        if self.common.name == ".git":  # not bare: the main worktree is its parent
            branch = _checked_out(self.common)
            if branch:
                found[str(self.common.parent.resolve())] = branch
        for git_dir in _subdirs(self.common / "worktrees"):
            try:
                top = Path((Path(git_dir) / "gitdir").read_text().strip()).parent
            except OSError:
                continue
            branch = _checked_out(git_dir)
            if branch:
                found[str(top.resolve())] = branch
        return found

    async def _read_unmerged(self, name: str) -> None:
        """Per path, the commits of branch ``name`` touching it that the tip lacks."""
        index = self.index
        span = [name] if index.tip is None else [name, "--not", index.tip]
        # --topo-order: a path's commits newest first (its first is the branch's version of it)
        out = await self._git("log", "--no-renames", "--name-only", "-z", "--topo-order", "--format=%x1e%H", *span, "--", check=False)
        if out.returncode != 0:
            index.unmerged.pop(name, None)
            return
        paths: dict[str, list[str]] = {}
        for chunk in out.stdout.decode("utf-8", "surrogateescape").split("\x1e"):
            commit, _, rest = chunk.partition("\0")
            for path in rest.lstrip("\n").split("\0"):
                if path and commit:
                    paths.setdefault(path, []).append(commit)
        if paths and index.tip is not None:
            # A file the tip already has as the branch has it (a squash or rebase merge
            # brought it, or the branch undid its change) waits for nothing.
            differ = await self._differing(index.tip, name)
            if differ is None:
                index.unmerged.pop(name, None)
                return
            paths = {path: commits for path, commits in paths.items() if path in differ}
        index.unmerged[name] = {path: tuple(commits) for path, commits in paths.items()}

    async def _differing(self, tip: str, rev: str) -> set[str] | None:
        """The files whose content differs between ``tip`` and ``rev`` (present in one of
        them only included); None if git cannot compare them (``rev`` is gone)."""
        out = await self._git("diff-tree", "-r", "--no-renames", "--name-only", "-z", tip, rev, "--", check=False)
        if out.returncode != 0:
            return None
        return {p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p}

    async def same_on_tip(self, holds: dict[str, tuple[str, str, str]]) -> set[str]:
        """Those of ``holds`` (key -> (file, branch, the newest held commit)) whose file
        the integration branch's tip has exactly as the branch has it: at the branch's
        tip while the branch exists, else at the newest held commit (a branch deleted
        after its squash merge).  A squash merge or a rebase merge brings a branch's
        changes without its commits: this is how their merge holds end."""
        async with self._lock:
            tip = self.index.tip
            if tip is None:
                return set()
            by_rev: dict[str, list[tuple[str, str]]] = {}
            for key, (file, branch, newest) in holds.items():
                rev = self.index.branches.get(branch) or (branch if is_commit_id(branch) else newest)
                if is_commit_id(rev):
                    by_rev.setdefault(rev, []).append((key, file))
            found = set()
            for rev, wanted in sorted(by_rev.items()):
                differ = await self._differing(tip, rev)
                if differ is not None:
                    found.update(key for key, file in wanted if file not in differ)
            return found

    async def merged_among(self, commits: set[str]) -> set[str]:
        """Those of ``commits`` reachable from the integration branch's tip."""
        async with self._lock:
            tip = self.index.tip
            if tip is None:
                return set()
            found = set()
            for commit in sorted(commits):
                if not is_commit_id(commit):
                    continue
                out = await self._git("merge-base", "--is-ancestor", commit, tip, check=False)
                if out.returncode == 0:
                    found.add(commit)
            return found

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
        if not is_commit_id(head) or self._left_to_the_watcher(False):
            return  # the core refuses it; never hand it to git.  Or: unknown, never stale
        async with self._lock:
            try:
                await self._ensure_lag(head)
            except GitTimedOut as exc:
                self._timed_out(f"could not ask git about {head[:10]}", exc)
            except (OSError, GitFailed) as exc:
                log.warning("could not ask git about %s: %s", head, exc)

    async def _ensure_lag(self, head: str) -> None:
        index = self.index
        if index.tip is None or index.knows(head):
            return
        out = await self._git("rev-list", f"{head}..{index.tip}", check=False)
        if out.returncode != 0:  # not a commit of this repository: unknown, never stale
            index.set_lag(head, frozenset())
            return
        index.set_lag(head, frozenset(out.stdout.decode().split()))

    async def watch(self, on_main_moved=None, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Follow the refs forever; warm the lag of every branch tip that moved; call
        ``on_main_moved()`` whenever the integration branch has a new tip (and once at
        start: holds restored from the ledger may have been merged meanwhile)."""
        await self.sync()
        task_status.started()
        settled = object()
        while True:
            if on_main_moved is not None and self.index.tip != settled:
                tip = self.index.tip
                try:
                    await on_main_moved()
                    settled = tip
                except GitTimedOut as exc:  # tried again at the next poll
                    self.timed_out = f"could not settle the merge holds at {(tip or '')[:10]}"
                    log.warning("%s: %s; trying again", self.timed_out, exc)
                except (OSError, GitFailed) as exc:
                    settled = tip
                    log.warning("could not settle the merge holds at %s: %s", (tip or "")[:10], exc)
            await trio.sleep(POLL_INTERVAL if self.timed_out is None else RETRY_INTERVAL)
            for name in await self.sync(retry=True):
                commit = self.index.branches.get(name)
                if commit and name != self.index.branch:
                    await self.ensure_lag(commit)


def _checked_out(git_dir: str | os.PathLike) -> str | None:
    """``refs/heads/NAME`` of a worktree's git dir, or its HEAD's commit id when detached."""
    branch = symbolic_head(git_dir)
    if branch:
        return branch
    try:
        head = Path(git_dir, "HEAD").read_text().strip()
    except OSError:
        return None
    return head if is_commit_id(head) else None


def _why(exc: BaseException) -> str:
    stderr = getattr(exc, "stderr", None)
    return stderr.decode(errors="replace").strip() if stderr else str(exc)


def _subdirs(path: Path | str) -> list[str]:
    try:
        return [entry.path for entry in os.scandir(path) if entry.is_dir()]
    except OSError:
        return []
