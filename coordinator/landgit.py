"""The git side of landing: merge in memory, read conflicts, verify in a scratch
worktree, move the integration branch by compare-and-swap.

Every call runs git as a child process through ``trio.run_process``: the coordinator's
trio loop never waits on git.  Each call has a deadline (``[land] git_timeout``): git
runs in a process group of its own, so that a hook it started (a
``reference-transaction`` hook that never returns) is ended with it, and a stuck git
refuses the landing it was part of instead of stalling the merge queue behind it.
Nothing here touches an agent's worktree; the only worktrees written are the coordinator's scratch worktree (under its state directory)
and, when the integration branch is checked out somewhere, that checkout — moved from
the old commit to the new one with ``git read-tree -m -u`` (git's own two-tree
fast-forward, which refuses rather than overwrite a local change).

The parsers are pure functions (``parse_merge_tree``, ``conflict_hunks``), tested on
their own.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

import trio

from protocol.gitrefs import is_commit_id

log = logging.getLogger("lockstep")

COMMITS_PER_CONFLICT = 5  # integration commits named per conflicting file
HUNKS_PER_FILE = 10  # conflict hunks shown per file
HUNK_LINES = 20  # lines kept of each side of a hunk
LANDED_COMMITS_KEPT = 500  # a landing's commits recorded (for naming the agent of a later conflict)
GIT_TIMEOUT = 120.0  # seconds a git call may take (the default of ``[land] git_timeout``)
RUN_HOOKS = {"update-ref", "fetch", "worktree", "checkout"}  # the commands of a landing that run hooks (reference-transaction, post-checkout)
TERM_GRACE = 2.0  # seconds a timed-out git has after SIGTERM (to remove its lock files) before SIGKILL


class GitFailed(Exception):
    """git said no in a way that is not a verdict (a missing object, a broken repo)."""


class GitTimedOut(GitFailed):
    """git did not finish within its deadline; it and every process it started are ended."""


@dataclass
class MergeResult:
    tree: str
    clean: bool
    conflicts: dict[str, str] = field(default_factory=dict)  # path -> kind (content, add/add, ...)


def parse_merge_tree(out: bytes) -> MergeResult:
    """``git merge-tree --write-tree --name-only -z`` output: the tree, the conflicted
    paths, then informational messages (``N\\0path...\\0type\\0message\\0``)."""
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    tree = fields[0]
    paths: list[str] = []
    i = 1
    while i < len(fields) and fields[i]:
        paths.append(fields[i])
        i += 1
    kinds: dict[str, str] = {}
    i += 1  # the empty field between the two sections
    while i < len(fields):
        try:
            count = int(fields[i])
        except ValueError:
            break
        named = fields[i + 1 : i + 1 + count]
        kind = fields[i + 1 + count] if i + 1 + count < len(fields) else ""
        i += count + 3
        if kind.startswith("CONFLICT ("):
            for path in named:
                kinds.setdefault(path, kind[len("CONFLICT (") :].rstrip(")"))
    conflicts = {path: _kind_name(kinds.get(path, "content")) for path in dict.fromkeys(paths)}
    return MergeResult(tree=tree, clean=not conflicts, conflicts=conflicts)


def _kind_name(kind: str) -> str:
    return "content" if kind == "contents" else kind


def conflict_hunks(text: str) -> list[dict]:
    """The conflict hunks of a file git wrote with markers: where each starts (1-based
    line of the ``<<<<<<<`` marker), the integration branch's lines (``ours``) and the
    landing branch's (``theirs``), each bounded."""
    ours, theirs = "ours", "theirs"
    hunks: list[dict] = []
    side = None
    hunk: dict = {}
    for number, line in enumerate(text.splitlines(), 1):
        if side is None and line.startswith("<<<<<<< "):
            side, hunk = "ours", {"line": number, ours: [], theirs: []}
        elif side == "ours" and line.startswith("|||||||"):
            side = "base"
        elif side in ("ours", "base") and line == "=======":
            side = "theirs"
        elif side == "theirs" and line.startswith(">>>>>>> "):
            hunks.append(hunk)
            side = None
            if len(hunks) >= HUNKS_PER_FILE:
                break
        elif side == "ours":
            _keep(hunk[ours], line)
        elif side == "theirs":
            _keep(hunk[theirs], line)
    return hunks


def _keep(lines: list[str], line: str) -> None:
    if len(lines) < HUNK_LINES:
        lines.append(line)
    elif len(lines) == HUNK_LINES:
        lines.append("…")


class Git:
    """git in one repository (its common dir), as child processes."""

    def __init__(self, common: str | os.PathLike, timeout: float = GIT_TIMEOUT) -> None:
        self.common = Path(common)
        self.timeout = timeout

    async def run(self, *args: str, cwd: Path | None = None, check: bool = True, env: dict | None = None, hooks: bool = True) -> trio.CompletedProcess:
        config = ["-c", "core.quotePath=false"] + ([] if hooks else ["-c", f"core.hooksPath={os.devnull}"])
        argv = ["git", *config, *args] if cwd is not None else ["git", f"--git-dir={self.common}", *config, *args]
        child_env = None
        if env:
            child_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in env}
            child_env.update(env)
        elif cwd is not None:  # a worktree's git must find the worktree from its cwd
            child_env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")}
        done = await self._bounded(argv, cwd, child_env)
        if done is None:
            guess = " (a hook in .git/hooks?)" if hooks and args[0] in RUN_HOOKS else ""
            raise GitTimedOut(f"git {args[0]} timed out after {self.timeout:g} s{guess}")
        if check and done.returncode != 0:
            raise GitFailed(f"git {' '.join(args[:3])}: {one_line(done.stderr) or f'exit {done.returncode}'}")
        return done

    async def _bounded(self, argv: list[str], cwd: Path | None, env: dict | None) -> trio.CompletedProcess | None:
        """git run to its end, or None past ``self.timeout``: then its process group
        (git and the hooks it started: they inherit the group) gets SIGTERM, which lets
        git remove its lock files (a ``refs/heads/main.lock`` left behind would refuse
        every later move of main), then SIGKILL for whatever ignored it."""
        done: list[trio.CompletedProcess] = []

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            done.append(await trio.run_process(
                argv, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False, env=env,
                start_new_session=True, deliver_cancel=_end_group, task_status=task_status,
            ))

        proc = None
        with trio.move_on_after(self.timeout):
            async with trio.open_nursery() as nursery:
                proc = await nursery.start(run)
        if done:
            return done[0]
        if proc is not None:  # git may be gone while a hook's child still holds its pipes
            _signal_group(proc.pid, signal.SIGKILL)
        return None

    async def resolve(self, ref: str) -> str | None:
        out = await self.run("rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False)
        text = out.stdout.decode().strip()
        return text if out.returncode == 0 and is_commit_id(text) else None

    async def is_ancestor(self, older: str, newer: str) -> bool:
        return (await self.run("merge-base", "--is-ancestor", older, newer, check=False)).returncode == 0

    async def merge_tree(self, ours: str, theirs: str) -> MergeResult:
        out = await self.run("merge-tree", "--write-tree", "--name-only", "-z", "--messages", ours, theirs, check=False)
        if out.returncode not in (0, 1):
            raise GitFailed(f"git merge-tree: {out.stderr.decode(errors='replace').strip()}")
        result = parse_merge_tree(out.stdout)
        if out.returncode == 1 and result.clean:  # conflicts git did not list by path
            result.clean = False
        return result

    async def hunks(self, tree: str, path: str) -> list[dict]:
        out = await self.run("cat-file", "blob", f"{tree}:{path}", check=False)
        if out.returncode != 0:
            return []  # deleted on one side: no markers to show
        return conflict_hunks(out.stdout.decode("utf-8", "replace"))

    async def commits_touching(self, since: str, until: str, paths: list[str]) -> dict[str, list[tuple[str, str, str]]]:
        """Per path, the commits of ``since..until`` that changed it (newest first):
        (commit, author, subject)."""
        out = await self.run("log", "--no-renames", "--name-only", "-z", "--format=%x1e%H%x1f%an%x1f%s", f"{since}..{until}", "--", *paths, check=False)
        found: dict[str, list[tuple[str, str, str]]] = {}
        wanted = set(paths)
        for chunk in out.stdout.decode("utf-8", "surrogateescape").split("\x1e"):
            if not chunk:
                continue
            header, _, rest = chunk.partition("\0")
            commit, author, subject = (header.split("\x1f") + ["", ""])[:3]
            for path in rest.lstrip("\n").split("\0"):
                if path in wanted and len(found.setdefault(path, [])) < COMMITS_PER_CONFLICT:
                    found[path].append((commit, author, subject))
        return found

    async def merge_base(self, a: str, b: str) -> str | None:
        out = await self.run("merge-base", a, b, check=False)
        text = out.stdout.decode().strip()
        return text if out.returncode == 0 and is_commit_id(text) else None

    async def changed(self, old: str, new: str) -> list[str]:
        out = await self.run("diff", "--no-renames", "--name-only", "-z", old, new)
        return [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]

    async def commits_between(self, old: str, new: str) -> list[str]:
        out = await self.run("rev-list", f"--max-count={LANDED_COMMITS_KEPT}", f"{old}..{new}", check=False)
        return out.stdout.decode().split()

    async def commit_merge(self, tree: str, ours: str, theirs: str, message: str, agent: str) -> str:
        identity = {
            "GIT_AUTHOR_NAME": agent, "GIT_AUTHOR_EMAIL": f"{agent}@lockstep.invalid",
            "GIT_COMMITTER_NAME": "lockstep", "GIT_COMMITTER_EMAIL": "lockstep@lockstep.invalid",
        }
        out = await self.run("commit-tree", tree, "-p", ours, "-p", theirs, "-m", message, env=identity)
        return out.stdout.decode().strip()

    async def compare_and_swap(self, ref: str, new: str, old: str, reason: str) -> bool:
        """Move ``ref`` to ``new`` only if it still is ``old``.  git timing out (a hook
        that never returns) raises ``GitTimedOut`` unless the ref did move: a
        ``reference-transaction`` hook stuck at its ``committed`` call, after the update."""
        try:
            out = await self.run("update-ref", "-m", reason, ref, new, old, check=False)
        except GitTimedOut as exc:
            if await self.resolve(ref) == new:
                log.warning("%s moved to %s, then %s: the update is kept", ref, new[:10], exc)
                return True
            raise
        if out.returncode == 0:
            return True
        if await self.resolve(ref) == old:  # it did not move: git itself refused (a hook, a lock)
            raise GitFailed(f"git update-ref {ref}: {one_line(out.stderr) or f'exit {out.returncode}'}")
        return False

    # ------------------------------------------------------------ worktrees

    async def checkout_scratch(self, path: Path, commit: str) -> None:
        """The coordinator's own worktree at ``path``, detached at ``commit``, with
        nothing else in it (made on first use; a half-made one is made again).  The
        repository's hooks do not run here: a ``post-checkout`` written for people's
        checkouts (failing, or slow) would otherwise fail or stall every landing."""
        if not (path / ".git").exists():
            await self.run("worktree", "prune", check=False)
            if path.exists():
                await trio.to_thread.run_sync(_remove_tree, path)
            path.parent.mkdir(parents=True, exist_ok=True)
            await self.run("worktree", "add", "--force", "--detach", str(path), commit, hooks=False)
            return
        await self.run("checkout", "-q", "-f", "--detach", commit, cwd=path, hooks=False)
        await self.run("clean", "-q", "-ffdx", cwd=path, hooks=False)

    async def checked_out(self, worktree: Path) -> str | None:
        """What a worktree's HEAD is (for the checkout of the integration branch)."""
        out = await self.run("rev-parse", "--verify", "-q", "HEAD", cwd=worktree, check=False)
        return out.stdout.decode().strip() or None

    async def local_changes(self, worktree: Path) -> list[str]:
        """Tracked files that differ from the worktree's HEAD (staged or not)."""
        await self.run("update-index", "-q", "--refresh", cwd=worktree, check=False)
        out = await self.run("status", "--porcelain", "-z", "--untracked-files=no", cwd=worktree, check=False)
        return [entry[3:] for entry in out.stdout.decode("utf-8", "surrogateescape").split("\0") if len(entry) > 3]

    async def left_at(self, worktree: Path, commit: str) -> bool:
        """Whether a checkout's index and tracked files are exactly ``commit``'s."""
        await self.run("update-index", "-q", "--refresh", cwd=worktree, check=False)
        staged = await self.run("diff-index", "--quiet", "--cached", commit, cwd=worktree, check=False)
        files = await self.run("diff-index", "--quiet", commit, cwd=worktree, check=False)
        return staged.returncode == 0 and files.returncode == 0

    async def move_checkout(self, worktree: Path, old: str, new: str) -> str | None:
        """Bring a clean checkout from ``old`` to ``new``; None, or why it could not."""
        try:
            out = await self.run("read-tree", "-m", "-u", old, new, cwd=worktree, check=False)
        except GitTimedOut as exc:
            return str(exc)
        if out.returncode != 0:
            return out.stderr.decode(errors="replace").strip() or f"git read-tree exit {out.returncode}"
        return None


def one_line(stderr: bytes) -> str:
    """git's complaint on one line: its ``fatal:``/``error:`` lines (the progress
    chatter before them, such as "Preparing worktree", says nothing)."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines
    return "; ".join(said)


async def _end_group(proc: trio.Process) -> None:
    """``run_process``'s way to stop a cancelled git: its whole process group."""
    _signal_group(proc.pid, signal.SIGTERM)
    with trio.move_on_after(TERM_GRACE):
        await proc.wait()
    _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):  # every process of it has exited
        pass


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
