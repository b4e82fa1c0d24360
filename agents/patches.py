"""The files a Codex ``apply_patch`` envelope writes, moves and deletes.

Codex edits files with one tool, ``apply_patch``, whose input (``tool_input.command`` in
its ``PreToolUse`` hook) is an envelope of file sections::

    *** Begin Patch
    *** Add File: src/new.py
    +print("hi")
    *** Update File: src/old.py
    *** Move to: src/renamed.py
    @@ def f():
    -    return 1
    +    return 2
    *** Delete File: src/gone.py
    *** End Patch

Only the ``*** `` header lines name files; hunk lines start with `` ``, ``+``, ``-`` or
``@@``, so a header-looking text inside a hunk (``+*** Add File: x``) is content, not a
section.  The envelope may arrive inside a shell call (``apply_patch <<'EOF' ... EOF``);
the headers are read the same way.  Paths are as written (Codex gives them relative to
the session's working directory or absolute); the caller resolves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PatchFiles", "patch_files"]

MAX_PATCH_CHARS = 10_000_000

_HEADERS = {
    "*** Add File: ": "added",
    "*** Update File: ": "updated",
    "*** Delete File: ": "deleted",
    "*** Move to: ": "moved_to",
}


@dataclass
class PatchFiles:
    """Files an envelope touches.  ``written`` is every path whose content changes or
    appears (added, updated, move destinations); ``deleted`` every path that disappears
    (deleted files and move sources)."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    moves: list[tuple[str, str]] = field(default_factory=list)
    is_patch: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def written(self) -> list[str]:
        moved_from = {source for source, _ in self.moves}
        kept = [path for path in self.updated if path not in moved_from]
        return list(dict.fromkeys(self.added + kept + [target for _, target in self.moves]))

    @property
    def removed(self) -> list[str]:
        return list(dict.fromkeys(self.deleted + [source for source, _ in self.moves]))

    @property
    def paths(self) -> list[str]:
        """Every path the envelope writes or removes, in first-seen order."""
        return list(dict.fromkeys(self.written + self.removed))


def patch_files(text: object) -> PatchFiles:
    """Read the file headers of an ``apply_patch`` envelope (never raises)."""
    found = PatchFiles()
    if not isinstance(text, str):
        found.problems.append(f"the patch is {type(text).__name__}, not text")
        return found
    if len(text) > MAX_PATCH_CHARS:
        found.problems.append(f"the patch is longer than {MAX_PATCH_CHARS} characters")
        return found
    last_update: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if line.strip() == "*** Begin Patch":
            found.is_patch = True
            continue
        for header, kind in _HEADERS.items():
            if not line.startswith(header):
                continue
            path = line[len(header) :].strip()
            if not path:
                found.problems.append(f"{header.strip()} names no file")
                break
            if kind == "moved_to":
                if last_update is None:
                    found.problems.append(f"*** Move to: {path} follows no *** Update File:")
                    found.added.append(path)
                else:
                    found.moves.append((last_update, path))
            else:
                getattr(found, kind).append(path)
                last_update = path if kind == "updated" else None
            break
    if not found.is_patch and (found.added or found.updated or found.deleted):
        found.problems.append("file headers without '*** Begin Patch'")
    return found
