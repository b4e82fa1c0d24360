"""The files a unified diff writes, read off its headers: what ``git apply`` and ``patch``
will change before they run.

An agent applies its changes with ``git apply - <<'EOF'``, ``patch -p1 < fix.diff`` or
``git apply fix.patch``; the shell reading (``agents.shellwrites``) hands the diff's text
(a here-document) or its file (read by the hook) here.

* ``diff --git a/X b/Y`` names X and Y; ``--- X`` followed by ``+++ Y`` names both
  (``/dev/null`` is no file: a file created or deleted); ``rename from``/``rename to``,
  ``copy to`` name the files of a rename or copy, without the a/ b/ prefixes.
* ``strip`` drops that many leading folders, as ``-pN`` does (``git apply``: 1 unless
  told; ``patch`` with no ``-p``: only the file's name is kept, GNU patch's rule); a name
  with fewer folders than that is not named.  A tab ends a name (a timestamp follows);
  git's quoted names (``"a/x y"``) are unquoted.
* Lines of a hunk are not headers: a hunk's line counts are followed, so a removed line
  ``-- x`` or an added ``++ y`` inside it never reads as ``--- x`` / ``+++ y``.

Paths are returned as the diff names them after stripping, relative to the folder the
tool runs in; the caller joins and resolves them.
"""

from __future__ import annotations

import posixpath
import re

__all__ = ["MAX_DIFF_CHARS", "diff_paths"]

MAX_DIFF_CHARS = 10_000_000
MAX_NAMES = 1000
_HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_paths(text: str, strip: int | None) -> list[str]:
    """The files the diff ``text`` writes; ``strip`` as ``-pN`` (None: the name only)."""
    names: list[str] = []
    lines = text[:MAX_DIFF_CHARS].split("\n")
    index = 0
    while index < len(lines) and len(names) < MAX_NAMES:
        line = lines[index]
        hunk = _HUNK.match(line)
        if hunk:  # skip its lines: they are content, whatever they start with
            old = int(hunk.group(1) or 1) if hunk.group(1) != "0" else 0
            new = int(hunk.group(2) or 1) if hunk.group(2) != "0" else 0
            index += 1
            while index < len(lines) and (old > 0 or new > 0):
                body = lines[index]
                if body.startswith("-"):
                    old -= 1
                elif body.startswith("+"):
                    new -= 1
                elif body.startswith("\\"):
                    pass  # "\ No newline at end of file"
                else:
                    old, new = old - 1, new - 1
                index += 1
            continue
        if line.startswith("diff --git "):
            names += [_stripped(name, strip) for name in _git_names(line[len("diff --git ") :])]
        elif line.startswith("--- ") and index + 1 < len(lines) and lines[index + 1].startswith("+++ "):
            names += [_stripped(_name(line[4:]), strip), _stripped(_name(lines[index + 1][4:]), strip)]
            index += 1
        elif line.startswith(("rename from ", "rename to ", "copy to ")):
            names.append(_name(line.split(" ", 2)[2]))
        index += 1
    return [name for name in dict.fromkeys(names) if name and name != "/dev/null"]


def _name(text: str) -> str:
    """A header's file name: up to a tab (a timestamp follows), git's quotes removed."""
    name = text.split("\t", 1)[0].rstrip("\r")
    if len(name) >= 2 and name.startswith('"') and name.endswith('"'):
        try:
            name = name[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode("utf-8")
        except (UnicodeError, ValueError):
            name = name[1:-1]
    return name


def _git_names(text: str) -> list[str]:
    """``a/X b/Y`` of a ``diff --git`` line (names with spaces: split where ' b/' starts
    the second one, as git does for unquoted names)."""
    if text.startswith('"'):
        end = text.find('"', 1)
        return [_name(text[: end + 1]), _name(text[end + 1 :].strip())] if end > 0 else []
    cut = text.find(" b/")
    return [text[:cut], text[cut + 1 :]] if cut >= 0 else text.split(" ", 1)


def _stripped(name: str, strip: int | None) -> str:
    if name == "/dev/null" or not name:
        return ""
    if strip is None:
        return posixpath.basename(name)
    parts = name.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else ""
