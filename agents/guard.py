"""The git guard: a pre-commit / pre-push hook that refuses to commit or push files
another live agent holds.

Installed once into the repository's common hooks folder, it runs in every worktree.
As an agent (``LOCKSTEP_AGENT``, as ``lockstep run`` sets it) each touched file is a
write intent: blocked files stop the commit, allowed ones are claimed for the agent
(committing a file is writing it).  Without an agent name (a person committing) a file
is refused if any live agent holds a claim on it.

A rename or copy touches two names and both are checked: ``git mv held.py x.py`` takes
``held.py`` away from its holder as surely as editing it.  Every deleted path is checked
too.  The names come from ``--name-status -z`` (NUL-separated, so any file name reads
back exactly), with rename detection on whatever the user's configuration says.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

from protocol.errors import LockstepError

ZERO_SHA = "0" * 40
_OBJECT_NAME = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")  # sha-1 or sha-256
HOOKS = ("pre-commit", "pre-push", "pre-merge-commit", "reference-transaction")
# The guard command each hook runs: a merge that needs no resolution commits without
# pre-commit; git runs pre-merge-commit for it instead, with the same staged-files check.
# git has no stash hook: a stash is seen as the update of refs/stash it commits (git
# runs reference-transaction for every ref update; the hook's shell lines pass on only
# that one, so a commit or a checkout starts no Python).
GUARD_COMMAND = {"pre-commit": "pre-commit", "pre-push": "pre-push", "pre-merge-commit": "pre-commit", "reference-transaction": "stashed"}
# Hooks that only warn: a user's own one in the way is left as it is (and named), not a
# reason to refuse the install.
OPTIONAL_HOOKS = frozenset({"reference-transaction"})
MARKER = "# Installed by `lockstep guard install`"  # the line that makes a hook file Lockstep's


# What to add to a user's own hook.  pre-push reads git's ref lines on stdin: a hook that
# reads them itself (`while read ...`) and then runs the guard left it nothing to check.
ADD_LINE = {
    "pre-commit": "`lockstep guard pre-commit`",
    "pre-merge-commit": "`lockstep guard pre-commit`",
    "reference-transaction": "`lockstep guard stashed NEW` for a committed update of refs/stash to NEW (a warning only)",
    "pre-push": (
        "`lockstep guard pre-push \"$@\"` with git's ref lines on its stdin (if your hook reads them too, "
        "keep a copy first: `refs=$(cat)`, then `printf '%s\\n' \"$refs\" | lockstep guard pre-push \"$@\"`)"
    ),
}


class GuardError(LockstepError):
    pass


def _git(cwd: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise GuardError(f"git {' '.join(args)} failed: {_first_error(exc.stderr)}") from None


def _first_error(stderr: str) -> str:
    """git's complaint in one line: its first ``fatal:``/``error:`` line (a usage text
    after it says nothing more), else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else "no message")


def _has_commit(worktree: Path, name: str) -> bool:
    """Whether this repository has commit ``name``: a force push over a remote branch
    that moved since the last fetch names a remote commit we never saw."""
    return subprocess.run(["git", "cat-file", "-e", f"{name}^{{commit}}"], cwd=worktree, capture_output=True).returncode == 0


def name_status_paths(out: str) -> list[str]:
    """Every path named in ``git ... --name-status -z`` output: both names of a rename
    (``R``) or copy (``C``), one for any other status; first-seen order, no repeats."""
    fields = out.split("\0")
    paths: list[str] = []
    index = 0
    while index < len(fields):
        status = fields[index]
        if not status:
            index += 1
            continue
        names = 2 if status[:1] in ("R", "C") else 1
        paths.extend(name for name in fields[index + 1 : index + 1 + names] if name)
        index += 1 + names
    return list(dict.fromkeys(paths))


def staged_files(worktree: Path) -> list[str]:
    """Repo-relative paths the commit would add, change, delete, rename or copy (both
    names of a rename or copy)."""
    out = _git(worktree, "diff", "--cached", "--name-status", "-z", "-M", "--diff-filter=ACMRDT")
    return name_status_paths(out)


def brought_from_integration(worktree: Path, files: list[str], merging: list[str], integration: str | None) -> set[str]:
    """Of the staged ``files`` of a merge being concluded, those whose staged content is
    what a merged commit already on the ``integration`` branch has: ``git merge main``
    brings main's changes, which are everyone's base, not this commit's writes (the
    stale-base gate asks for that merge: refusing it for a file main changed that someone
    holds again left no way forward).  A file the resolution changed differs from every
    merged head and stays checked; so does everything a merge of any other branch brings."""
    base = _integration_ref(worktree, integration)
    if not base or not files:
        return set()
    brought: set[str] = set()
    for head in merging:
        if not _OBJECT_NAME.fullmatch(head):
            continue
        on_base = subprocess.run(["git", "merge-base", "--is-ancestor", head, base[0]], cwd=worktree, capture_output=True)
        if on_base.returncode != 0:
            continue
        out = _git(worktree, "diff", "--cached", "--name-only", "-z", "--no-renames", head, "--")
        differs = {name for name in out.split("\0") if name}
        brought.update(path for path in files if path not in differs)
    return brought


def pushed_files(worktree: Path, updates: str, integration: str | None = None) -> list[str]:
    """Files changed by the commits a push sends (git gives ``local-ref local-sha
    remote-ref remote-sha`` lines on stdin).  Anything else on a line is skipped: only
    object names ever reach git's command line.

    The commits are those the remote branch lacks and, for a push of any other branch
    than the ``integration`` branch, that the integration branch lacks too: its commits
    (``lockstep land`` moves it locally, ahead of any remote) are everyone's base, not
    this push's changes - a branch that merged ``main`` is not refused for them.  A push
    of the integration branch itself is checked for all it sends.  A merge commit counts
    for the files its own resolution changed (a dense combined diff), not for what it
    brought in.  No rename detection: a rename is its deleted and its added name, both
    checked."""
    files: set[str] = set()
    base = _integration_ref(worktree, integration)
    for line in updates.splitlines():
        parts = line.split()
        if len(parts) != 4 or not all(_OBJECT_NAME.fullmatch(parts[i]) for i in (1, 3)):
            continue
        local, remote = parts[1], parts[3]
        excluded = [] if base and base[0] in (parts[0], parts[2]) else base
        if set(local) == {"0"}:
            continue  # a deletion pushes no files
        if set(remote) == {"0"} or not _has_commit(worktree, remote):
            # a new branch, or one whose remote tip we lack: what it has beyond every
            # remote branch we know
            exclude = ["--remotes"]
        else:
            exclude = [remote]
        out = _git(
            worktree, "log", "--format=", "--name-only", "-z", "--no-renames", "--diff-merges=dense-combined",
            local, "--not", *exclude, *excluded, "--",
        )
        files.update(name for name in out.split("\0") if name)
    return sorted(files)


def _integration_ref(worktree: Path, name: str | None) -> list[str]:
    """``[refs/heads/NAME]`` when this repository has that branch, else nothing (a clone
    whose integration branch is only a remote-tracking one: ``--remotes`` covers it)."""
    if not name:
        return []
    ref = name if name.startswith("refs/") else f"refs/heads/{name}"
    found = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], cwd=worktree, capture_output=True)
    return [ref] if found.returncode == 0 else []


def _owner(path: Path, hook: str) -> str:
    """Whose hook file ``path`` is: "none" (absent), "ours" (written by ``install``),
    "calls" (the user's own, running ``lockstep guard HOOK`` among its lines) or "theirs"."""
    if not path.exists():
        return "none"
    text = path.read_text(errors="replace")
    if MARKER in text:
        return "ours"
    command = GUARD_COMMAND[hook]
    return "calls" if f"lockstep guard {command}" in text or f"agents.cli guard {command}" in text else "theirs"


def install(worktree: Path, kept: list[Path] | None = None, left: list[Path] | None = None) -> list[Path]:
    """Write the hooks into the common hooks folder (every worktree uses it).  A relative
    ``core.hooksPath`` (``.githooks``, ``.husky``) is a folder of each worktree (git
    resolves it in the worktree that commits): the hooks go into every worktree's.

    Only Lockstep's own hook files are rewritten: a user's hook that already runs
    ``lockstep guard HOOK`` among its own lines is kept as it is (added to ``kept``),
    and any other is refused untouched (one that only warns, ``OPTIONAL_HOOKS``, is left
    as it is instead, added to ``left``)."""
    folders = hook_folders(worktree)
    owners = {}
    for folder in folders:  # check every one before writing any
        for hook in HOOKS:
            path = folder / hook
            owners[path] = _owner(path, hook)
            if owners[path] == "theirs" and hook not in OPTIONAL_HOOKS:
                raise GuardError(f"{path} exists and is not Lockstep's: add {ADD_LINE[hook]} to it yourself")
    written = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for hook in HOOKS:
            path = folder / hook
            if owners[path] == "calls":  # the user's own hook, which runs the guard: theirs to keep
                if kept is not None:
                    kept.append(path)
                continue
            if owners[path] == "theirs":  # an optional hook of the user's own: no stash warnings
                if left is not None:
                    left.append(path)
                continue
            if owners[path] != "ours" or path.read_text(errors="replace") != hook_text(hook):
                path.write_text(hook_text(hook))  # an install that is current is left as it is
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            written.append(path)
    return written


def hook_folders(worktree: Path) -> list[Path]:
    """Where git looks for the hooks: the common hooks folder, or ``core.hooksPath`` (a
    relative one in every worktree)."""
    hooks_path = _git(worktree, "config", "--get", "core.hooksPath").strip() if _has_hooks_path(worktree) else ""
    if hooks_path and not os.path.isabs(os.path.expanduser(hooks_path)):
        folders = [top / hooks_path for top in worktrees(worktree)]
    elif hooks_path:
        folders = [Path(os.path.expanduser(hooks_path))]
    else:
        common = Path(_git(worktree, "rev-parse", "--git-common-dir").strip())
        folders = [(common if common.is_absolute() else worktree / common) / "hooks"]
    return [folder.resolve() for folder in folders]


def hook_text(hook: str, python: str | None = None) -> str:
    """The hook file this version writes (run by ``python``, the running one by default)."""
    head = f"#!/bin/sh\n{MARKER}: refuse to commit/push files other agents hold.\n"
    command = f'"{python or sys.executable}" -m agents.cli guard {GUARD_COMMAND[hook]}'
    if hook == "reference-transaction":
        return (
            head + "# Here: warn when `git stash` takes changes to held files out of the worktree.\n"
            '[ "$1" = committed ] || exit 0\n'
            "while read -r old new ref; do\n"
            '    if [ "$ref" = refs/stash ]; then\n'
            f'        case "$new" in *[!0]*) exec {command} "$new" ;; esac\n'
            "    fi\n"
            "done\n"
            "exit 0\n"
        )
    return head + f'exec {command} "$@"\n'


_RUNS_WITH = re.compile(r'^[ \t]*(?:[^\n]*\) )?exec "([^"\n]+)" -m ', re.M)

# A hook file's state (``inspect``).  Outdated: missing or stale where the guard is
# installed, which an older version's install leaves (it wrote fewer hooks, or others).
HOOK_STATES = {
    "current": "as this version writes it",
    "stale": "written by an older version",
    "missing": "not installed",
    "yours": "your own hook, which runs the guard",
    "foreign": "your own hook, which does not run the guard",
}


def hook_state(path: Path, hook: str) -> str:
    """One of ``HOOK_STATES``.  Which Python a hook of ours runs does not make it stale
    (another virtual environment's install is as good) unless that Python is gone, or
    the file is not executable (git skips it then, with a hint at most)."""
    owner = _owner(path, hook)
    if owner == "none":
        return "missing"
    if owner == "calls":
        return "yours"
    if owner == "theirs":
        return "foreign"
    text = path.read_text(errors="replace")
    runs = _RUNS_WITH.search(text)
    python = runs.group(1) if runs else None
    if python is None or not os.access(python, os.X_OK) or not os.access(path, os.X_OK):
        return "stale"
    return "current" if text == hook_text(hook, python) else "stale"


def inspect(worktree: Path) -> list[tuple[str, Path, str]]:
    """Every hook the guard installs, in every folder git runs hooks from: (hook, path,
    state)."""
    return [(hook, folder / hook, hook_state(folder / hook, hook)) for folder in hook_folders(worktree) for hook in HOOKS]


def stashed_files(worktree: Path, stash: str) -> list[str]:
    """The files a stash entry took out of the worktree: its changes to tracked files
    (staged or not) and the untracked files it holds (``git stash -u``)."""
    found = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{stash}^{{commit}}"], cwd=worktree, capture_output=True, text=True)
    commit = found.stdout.strip()
    if found.returncode != 0 or not _OBJECT_NAME.fullmatch(commit):
        return []
    names = _git(worktree, "diff", "--name-only", "-z", "--no-renames", f"{commit}^1", commit, "--").split("\0")
    names += _git(worktree, "diff", "--name-only", "-z", "--no-renames", f"{commit}^1", f"{commit}^2", "--").split("\0")
    untracked = subprocess.run(["git", "ls-tree", "-r", "--name-only", "-z", f"{commit}^3"], cwd=worktree, capture_output=True, text=True)
    if untracked.returncode == 0:
        names += untracked.stdout.split("\0")
    return sorted({name for name in names if name})


def worktrees(worktree: Path) -> list[Path]:
    """The tops of the repository's worktrees that exist (``git worktree list``)."""
    out = _git(worktree, "worktree", "list", "--porcelain", "-z")
    tops: list[Path] = []
    for field in out.split("\0"):
        if field.startswith("worktree "):
            tops.append(Path(field[len("worktree ") :]))
        elif field == "bare":  # a bare repository has no worktree to commit in
            tops.pop()
    return [top for top in tops if top.is_dir()] or [worktree]


def _has_hooks_path(worktree: Path) -> bool:
    return subprocess.run(["git", "config", "--get", "core.hooksPath"], cwd=worktree, capture_output=True).returncode == 0


def agent_name() -> str | None:
    return os.environ.get("LOCKSTEP_AGENT") or None
