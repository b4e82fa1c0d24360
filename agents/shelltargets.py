"""What a shell command writes, as the shell reading records it (``ShellWrites``), and
the steps every command's reading shares: a target joined onto the ``cd`` base and
recorded (braces expanded, a glob kept for the caller, ``/dev/...`` dropped, a name
built at run time said ``unknown``), a command's options parsed (``_operands``,
``_getopt``), a diff handed on (``_diff``).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Callable

_GLOB_CHARS = frozenset("*?[")


_MAX_BRACE_NAMES = 1000  # names one command's brace expressions may give (agents/braces.py)


@dataclass
class Stdin:
    """What a command reads on its standard input: a file (``< FILE``, as written) or a
    here-document's text."""

    file: str | None = None
    text: str | None = None
    words: list[str] | None = None  # the command piping into it


@dataclass
class Diff:
    """A diff ``git apply`` or ``patch`` applies: its ``text`` (a here-document) or its
    ``file`` (joined onto the command's folder, for the caller to read), with ``-pN``
    (``strip``; None: patch's rule, the name only).  The files it names are relative to
    ``folder`` (the command's, or for ``git apply`` the worktree's top: ``from_top``),
    below ``directory`` (``git apply --directory``)."""

    strip: int | None
    folder: str
    from_top: bool = False
    directory: str = ""
    text: str | None = None
    file: str | None = None


@dataclass
class ShellWrites:
    """What a command writes: ``targets`` (paths), ``globs`` (to expand), ``unknown``
    (why it may write more than that; empty when the reading is complete)."""

    targets: list[str] = field(default_factory=list)
    globs: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    # Targets written only by putting back what git has (``git checkout -- P``, ``git
    # restore P``: the index's bytes, or HEAD's): no new content, so the caller need not
    # ask for them (it is how a held file written by mistake is put back).
    restores: list[str] = field(default_factory=list)
    # Folders a formatter or fixer rewrites files of (``ruff format src``), with the
    # suffixes it formats (``agents.formatters``): the caller lists the candidates.
    formatted: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    # Diffs applied (``git apply``, ``patch``): the caller reads the files they name.
    diffs: list[Diff] = field(default_factory=list)
    braced: int = 0  # names brace expressions gave so far (all of a command's words share one bound)
    # How the caller reads a list of names (xargs's: ``xargs rm < list.txt``): the text of
    # the file at a path as returned (relative to the command's working directory), or
    # None when it cannot (missing, not a regular file, over ``MAX_LIST_BYTES``).  None:
    # no list is read, xargs's names are unknown.
    read_list: Callable[[str], str | None] | None = field(default=None, repr=False, compare=False)

    def note(self, reason: str) -> None:
        if reason not in self.unknown:
            self.unknown.append(reason)


def _join(base: str | None, path: str) -> str | None:
    if base is None and not path.startswith("/"):
        return None
    if path.startswith("/") or not base:
        return path
    return posixpath.join(base, path)


def _add(path: str, base: str | None, result: ShellWrites) -> None:
    """Record one write target, or the reason it cannot be named."""
    if not path:
        result.note("an empty target")
        return
    if "\0" in path:  # no file name has one (and globbing a folder named with it raised ValueError)
        result.note(f"the target {path!r} contains a NUL byte, which no file name has")
        return
    if "{" in path:  # bash expands braces first: src/{a,b}.py writes src/a.py and src/b.py
        from agents.braces import TooMany, expand

        try:
            names = expand(path, _MAX_BRACE_NAMES - result.braced)
        except TooMany as exc:
            result.braced = _MAX_BRACE_NAMES  # the bound is spent: the next words are not expanded either
            result.note(f"the target {path!r} names too many files to ask for ({exc})")
            return
        if names != [path]:
            result.braced += len(names)
            for name in names:
                _add(name, base, result)
            return
    if "$" in path or "`" in path:
        result.note(f"the target {path!r} is built from a variable or a command at run time")
        return
    if path.startswith("~"):
        path = posixpath.expanduser(path)
    joined = _join(base, path)
    if joined is None:
        result.note(f"the target {path!r} is relative to a folder that is unknown until run time")
        return
    if joined.startswith("/") and (posixpath.normpath(joined) + "/").startswith("/dev/"):
        return  # /dev/null, /dev/stderr: never a repository file (but /dev/../repo/f is)
    if _GLOB_CHARS & set(path):
        result.globs.append(joined)
    else:
        result.targets.append(joined)


def _brace_expanded(words: list[str], result: ShellWrites) -> list[str] | None:
    """The words as bash passes them, brace expressions expanded (within the command's
    bound), where their number matters (a copy's last operand is its destination); None
    past the bound (noted)."""
    if not any("{" in word for word in words):
        return words
    from agents.braces import TooMany, expand

    expanded: list[str] = []
    for word in words:
        try:
            names = expand(word, _MAX_BRACE_NAMES - result.braced)
        except TooMany as exc:
            result.braced = _MAX_BRACE_NAMES
            result.note(f"the operand {word[:200]!r} names too many files to ask for ({exc})")
            return None
        if names != [word]:
            result.braced += len(names)
        expanded += names
    return expanded


def _add_restore(path: str, base: str | None, result: ShellWrites) -> None:
    """A target git puts back (see ``ShellWrites.restores``)."""
    count = len(result.targets)
    _add(path, base, result)
    result.restores.extend(result.targets[count:])


def _is_assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier()


def _cd(args: list[str], base: str | None, result: ShellWrites) -> str | None:
    operands = [a for a in args if not a.startswith("-") or a == "-"]
    if not operands:
        result.note("cd to the home folder leaves the repository")
        return None
    target = operands[0]
    if target == "-" or "$" in target or "`" in target:
        result.note(f"cd {target} goes to a folder known only at run time")
        return None
    if target.startswith("~"):
        target = posixpath.expanduser(target)
    joined = _join(base, target)
    return None if joined is None else posixpath.normpath(joined)


def _operands(args: list[str], value_options: frozenset[str] = frozenset()) -> tuple[list[str], dict[str, str]]:
    """Split arguments into operands and options; ``--`` ends options."""
    operands: list[str] = []
    options: dict[str, str] = {}
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            operands.extend(args[index + 1 :])
            break
        if word.startswith("--") and "=" in word:
            key, _, value = word.partition("=")
            options[key] = value
        elif word in value_options and index + 1 < len(args):
            options[word] = args[index + 1]
            index += 1
        elif word.startswith("-") and len(word) > 1:
            options[word] = ""
        else:
            operands.append(word)
        index += 1
    return operands, options


def _getopt(args: list[str], short_values: str, long_values: frozenset[str] = frozenset(), attached: str = "") -> tuple[list[tuple[str, str | None]], list[str]]:
    """(each option with its value, None for a flag; the operands), getopt's way: a short
    option in ``short_values`` takes the rest of its cluster or the next word (``-so
    out``, ``-oout``); one in ``attached`` only the rest of its cluster, maybe empty
    (sed's ``-i[SUFFIX]``); a long one ``--opt=value``, or the next word if in
    ``long_values``; ``--`` ends the options."""
    options: list[tuple[str, str | None]] = []
    operands: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            operands += args[index + 1 :]
            break
        if word.startswith("--"):
            key, equals, value = word.partition("=")
            if not equals and key in long_values and index + 1 < len(args):
                index += 1
                value, equals = args[index], "="
            options.append((key, value if equals else None))
        elif word.startswith("-") and len(word) > 1:
            for position, letter in enumerate(word[1:], start=1):
                if letter in attached:
                    options.append(("-" + letter, word[position + 1 :]))
                    break
                if letter not in short_values:
                    options.append(("-" + letter, None))
                    continue
                value = word[position + 1 :]
                if not value and index + 1 < len(args):
                    index += 1
                    value = args[index]
                options.append(("-" + letter, value))
                break
        else:
            operands.append(word)
        index += 1
    return options, operands


def _values(options: list[tuple[str, str | None]], *names: str) -> list[str]:
    return [value for option, value in options if option in names and value is not None]


def _diff(source: Stdin | None, strip: int | None, base: str | None, folder: str, from_top: bool, directory: str,
          result: ShellWrites, tool: str) -> None:
    """Hand the diff ``source`` gives to the caller (``ShellWrites.diffs``)."""
    if source is not None and source.words and posixpath.basename(source.words[0]) == "cat":
        files = [word for word in source.words[1:] if not word.startswith("-")]
        if len(files) == 1:
            source = Stdin(file=files[0])  # cat fix.diff | patch -p1
    if source is None or (source.file is None and source.text is None):
        result.note(f"{tool} writes the files its diff names (given at run time)")
        return
    if source.file is not None:
        path = source.file
        if "$" in path or "`" in path or _GLOB_CHARS & set(path):
            result.note(f"{tool} writes the files named by a diff whose name is built at run time")
            return
        joined = _join(base, posixpath.expanduser(path))
        if joined is None:
            result.note(f"{tool} reads a diff in a folder known only at run time")
            return
        result.diffs.append(Diff(strip, folder, from_top, directory, file=joined))
    else:
        result.diffs.append(Diff(strip, folder, from_top, directory, text=source.text))
