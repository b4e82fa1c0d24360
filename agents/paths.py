"""Turning command-line paths into the repository-relative names the coordinator uses.

Like git: a path is relative to the current directory; symlinks are resolved; a path
in another worktree of the same repository names the same repo-relative path; a path
outside every worktree is bad input.  A trailing ``/`` or an existing directory means
the folder and everything under it.  In a glob, only the literal leading folders are
resolved; the wildcard part is kept as written.  A *literal* path (``claim --literal``,
and every path an editor or hook names) is resolved whole and escaped, so a file named
``app/[slug]/page.tsx`` is that file and never a glob.

A symbolic link in the repository names two things: the link itself, a file of its own
folder (``rm link`` and ``ln -sfn`` write it), and what it points to (a write through
it writes there).  ``claim``, ``release`` and ``intent`` (and the MCP tools so named) name both (``located`` gives
what it points to, ``located_link`` the link); the hooks ask for the link and, for a
link to a file, that file (``agents.toolwrites``); ``lockstep run``'s watcher reports a
link that changed as the link, and a write through it where it lands
(``agents.watch``).  So an agent holding a link and another writing through it, or
replacing it, conflict whichever way round.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from protocol.discovery import Place
from protocol.errors import PeerError, UsageError
from protocol.paths import canonical, escape

_WILDCARDS = set("*?[")


def _worktrees(place: Place) -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "worktree", "list", "--porcelain"],
            cwd=place.worktree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return [place.worktree]
    roots = [Path(line[len("worktree ") :]).resolve() for line in out.splitlines() if line.startswith("worktree ")]
    return roots or [place.worktree]


def repo_relative(arg: str, place: Place, cwd: str | os.PathLike | None = None, literal: bool = False) -> str:
    """The canonical repo-relative pattern for a path or glob typed by a user; with
    ``literal`` the whole of ``arg`` is one concrete path, glob characters included.

    A path the operating system refuses to look at (a segment over the file-name limit,
    a NUL byte, a loop of symlinks) is bad input, said in one line: ``UsageError``."""
    return located(arg, place, cwd, literal)[0]


def located(arg: str, place: Place, cwd: str | os.PathLike | None = None, literal: bool = False) -> tuple[str, Path]:
    """``repo_relative``'s pattern and the worktree the path is in (``place.worktree``
    unless it is in another worktree of the repository)."""
    if not arg:
        raise PeerError("bad_path", "empty path")
    try:
        return _located(arg, place, cwd, literal)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        shown = arg if len(arg) <= 120 else arg[:60] + "..." + arg[-40:]
        raise UsageError(f"bad path {shown!r}: {why}", code="bad_path") from None


def _located(arg: str, place: Place, cwd: str | os.PathLike | None, literal: bool) -> tuple[str, Path]:
    base = Path(cwd or os.getcwd())
    parts = arg.split("/")
    first_wild = None if literal else next((i for i, part in enumerate(parts) if _WILDCARDS & set(part) or "\\" in part), None)
    head = "/".join(parts if first_wild is None else parts[:first_wild]) or "."
    rest = [] if first_wild is None else parts[first_wild:]
    resolved = Path(os.path.realpath(base / head))
    roots = [place.worktree] + [r for r in _worktrees(place) if r != place.worktree] if not _under(resolved, place.worktree) else [place.worktree]
    for root in roots:
        if _under(resolved, root):
            relative = resolved.relative_to(root).as_posix()
            break
    else:
        raise PeerError("bad_path", f"{arg} is outside the repository (resolved to {resolved}; worktree {place.worktree})")
    # The resolved part names real folders and files: escaped, its names stay literal.
    pieces = [] if relative == "." else [escape(relative)]
    pieces += rest
    text = "/".join(pieces)
    if not rest and (arg.endswith("/") or resolved.is_dir()):
        text = text + "/" if text else "**"
    if not text:
        text = "**"
    return canonical(text), root


def located_link(arg: str, place: Place, cwd: str | os.PathLike | None = None) -> tuple[str, Path] | None:
    """The link ``arg`` itself, a file of its own folder: (its literal pattern, the
    worktree it is in), or None when ``arg`` is no symbolic link (``link/`` is what it
    points to)."""
    full = os.path.join(cwd or os.getcwd(), arg)
    if not arg or full.endswith("/") or not os.path.islink(full):
        return None
    folder, name = os.path.split(full)
    pattern, root = located(folder, place, cwd, literal=True)
    return canonical(("" if pattern == "**" else pattern.rstrip("/") + "/") + escape(name)), root


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class WriteElsewhere(Exception):
    """A write a hook saw lands in another worktree of the repository than the agent's
    own: it would change that worktree's branch, not the agent's.  ``str()`` says so."""


def check_own_worktree(arg: str, pattern: str, root: Path, place: Place) -> None:
    """Raise ``WriteElsewhere`` when ``root`` (where ``arg`` resolved, as ``pattern``) is
    not the worktree of ``place``, the agent's own."""
    if os.path.realpath(root) == os.path.realpath(place.worktree):
        return
    mine = Path(place.worktree, pattern.replace("\\", ""))  # the same file in this worktree (escapes dropped)
    raise WriteElsewhere(
        f"{arg} is in another worktree of this repository ({root}), not in this agent's own ({place.worktree}): "
        f"a write there lands on that worktree's branch, another agent's work. Make the change here instead: {mine}"
    )
