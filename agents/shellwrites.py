"""Which files a shell command will write, read off the command before it runs.

A coding agent's shell tool (Claude Code's ``Bash``, Codex's shell, Gemini CLI's
``run_shell_command``) writes files Lockstep never hears about: ``sed -i``, ``echo >``,
``git checkout -- f``.  Before such a call the hook asks a write intent for the paths this
module finds, so a file another agent holds is refused *before* it is overwritten.  After
the call the hook compares the worktree with its state before, which catches everything
this reading misses (generators, package managers, scripts; the formatters and fixers
it knows are read by ``agents.formatters``, their folders handed on in ``formatted``).

Theory
------
The reading is conservative in one direction only: every path it names is one the command
may write, and what it cannot read it says so (``unknown``) instead of guessing.  An
unknown command is allowed; the after-the-fact comparison is its safety net.

* Words and operators come from the standard library's ``shlex`` in POSIX mode with
  ``punctuation_chars``: quotes, backslashes and comments are handled as the shell does,
  and ``;  &  |  <  >  (  )`` and newlines come out as operator tokens (``&&``, ``>>``,
  ``2>`` arrives as ``2`` then ``>``).  We do not use a full bash grammar library: the
  maintained one (``bashlex``) is GPL, which this MIT project cannot ship, and a write
  target needs only the simple-command structure, which the tokens give exactly.
  ``shlex`` knows no ANSI-C quoting: a bare ``$'...'`` is decoded first, as bash does
  (``$'a\\x62c'`` is the word ``abc``; a malformed escape stays as written, a NUL ends
  the text), and a bare ``$"..."`` is read as ``"..."``.
* A command list is split at ``&& || ; | & |&`` and newlines into simple commands.  ``(``
  opens a subshell whose ``cd`` does not leak out; ``cd DIR`` (and ``pushd``) re-bases the
  relative paths of the commands after it.
* In each simple command: redirections ``> >> >| &> &>> <>`` (with any fd number) name
  targets; ``N>&M`` duplicates descriptors and names none.  Leading ``VAR=value`` words
  and the wrappers (``sudo doas env nice nohup time timeout stdbuf ionice setsid command
  exec``, with their options' values: ``timeout -s KILL 5``) are skipped; ``env -C DIR``
  and ``sudo -D DIR`` run the command in DIR, ``env -S TEXT`` splits TEXT into words,
  ``time -o FILE`` writes FILE.  Known writers
  (``tee``, ``sed -i`` and the files of sed's ``w FILE`` (command, or flag of ``s``), ``perl -i``, ``cp``, ``mv``, ``rm``, ``touch``, ``mkdir``,
  ``truncate``, ``ln``, ``install``, ``dd of=``, ``chmod``; ``git checkout -- P``,
  ``git restore``, ``git mv``, ``git rm``; the output options of ``curl -o``, ``wget -O``,
  ``sort -o``, ``iconv -o``, ``patch -o``; ``uniq IN OUT``, ``sponge``, ``rsync``,
  ``gzip``/``gunzip`` and kin, ``tar -c -f``, ``gawk -i inplace``) name their targets; ``bash -c SCRIPT`` and
  ``sh -c`` are read recursively (to a fixed depth), as are the commands of ``$(...)``
  and backquotes, quoted or not (not in single quotes: there they are text).  A target git only puts back (``git
  checkout [HEAD] -- P``, ``git restore [--source HEAD] P``) is also listed in
  ``restores``: it brings no new content.
* ``unknown`` collects the reasons a command may write more than ``targets``: a target
  built from ``$VAR``, ``$(...)`` or backticks, a here-document, ``cd`` to somewhere
  unknowable, ``xargs`` (but see below)/``find -exec``, ``eval`` of text built at run time (its words are
  read as a command: ``eval "rm x"``), git verbs that rewrite many files
  (``git checkout BRANCH``, ``reset --hard``, ``stash``, ...), archives extracted, a
  diff piped into ``patch``/``git apply``, a file ``wget``/``curl -O`` names after its URL,
  or text ``shlex``
  cannot split (an unclosed quote).
* ``find DIR ... -delete`` or ``-exec CMD {}`` where CMD writes the file found (``sed -i``,
  ``rm``, a formatter): the files in DIR with its ``-name '*.ext'`` suffixes (else all)
  are candidates, in ``formatted`` as a formatter's folder is; so are the folders of
  ``grep -rl``/``rg -l``/``git grep -l``/``find``/``git ls-files`` piped into ``xargs``
  running such a command (``grep -rl x src | xargs sed -i s/x/y/``).
* ``xargs`` given a list file (``xargs rm < list.txt``, ``-a``/``--arg-file``, ``cat list |
  xargs ...``): the caller reads it (``read_list``, bounded by ``MAX_LIST_BYTES`` and
  ``MAX_LIST_NAMES``) and its names, split as xargs splits them, are the operands of the
  command xargs runs.  A list that cannot be read falls back to the rules above.
* ``git apply``/``git am`` and ``patch`` write the files their diff names: a
  here-document's text, or the diff file (``git apply fix.diff``, ``patch -p1 < fix.diff``,
  ``patch -i``), are handed on in ``diffs`` (``Diff``) for the caller to read
  (``agents.diffs``).
* A target with a brace expression (``src/{a,b}.py``, ``f{1..3}``) is the names bash
  expands it to (``agents.braces``), up to ``_MAX_BRACE_NAMES`` for the whole command;
  past that it is ``unknown``.
* A target that contains ``* ? [`` is reported in ``globs``: the shell would expand it, so
  the caller expands it against the file system (an unmatched glob stays a literal name,
  as in bash).  A trailing ``/dev/...`` target is never a repository file and is dropped.

One blind spot comes from splitting with ``shlex``: a word that is *only* operator
characters (``';'`` quoted on its own) comes out as the operator.  The reading then
finds a redirection without a target or a stray operator and reports ``unknown``; it
never silently names the wrong file.

Paths are returned as written, joined onto the ``cd`` base (``os.path`` semantics, not
resolved): the caller resolves them against the command's working directory.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable

from agents.formatters import FormatterWrites, formatter_writes

__all__ = ["MAX_COMMAND_CHARS", "MAX_LIST_BYTES", "MAX_LIST_NAMES", "ShellWrites", "write_targets"]

MAX_COMMAND_CHARS = 100_000
MAX_LIST_BYTES = 1 << 20  # an xargs list file read before the call: at most 1 MiB ...
MAX_LIST_NAMES = 10_000  # ... and this many names (each is asked for)
_MAX_DEPTH = 3  # bash -c "bash -c '...'" nesting read through

_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "|&", "\n", ";;", ";&", ";;&"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_READ_REDIRECTS = frozenset({"<", "<<<"})
_HEREDOCS = frozenset({"<<", "<<-"})
_DUP_REDIRECTS = frozenset({">&", "<&"})
_WRAPPERS = frozenset({"sudo", "doas", "nice", "nohup", "time", "command", "exec", "builtin", "stdbuf", "ionice", "timeout", "setsid", "env"})
# A wrapper's options that take a value word (``timeout -s KILL 5 cmd``): the value is not
# the command.  Values glued on (``-sKILL``, ``--signal=KILL``) are one word anyway.
_WRAPPER_VALUES = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-U", "-r", "-t", "-T", "--user", "--group", "--chdir", "--host",
                       "--prompt", "--other-user", "--role", "--type", "--command-timeout", "--close-from"}),
    "doas": frozenset({"-u", "-C"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata", "--pid", "--pgid", "--uid"}),
    "timeout": frozenset({"-k", "-s", "--kill-after", "--signal"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "exec": frozenset({"-a"}),
    "time": frozenset({"-o", "-f", "--output", "--format"}),
}
# Words that start a compound command's part; the real command follows them.
_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "fi", "done", "esac"})
_NOT_COMMANDS = frozenset({"for", "case", "select", "function", "in"})
_OPAQUE = {
    "xargs": "xargs runs a command on arguments it reads at run time",
    "eval": "eval runs text built at run time",
    "source": "a sourced script may write anything",
    ".": "a sourced script may write anything",
    "parallel": "parallel runs commands built at run time",
}
_GIT_MANY = frozenset(
    {"reset", "stash", "apply", "am", "merge", "pull", "rebase", "switch", "cherry-pick", "revert", "clean", "worktree", "clone", "init", "submodule"}
)
_GLOB_CHARS = frozenset("*?[")
_MAX_BRACE_NAMES = 1000  # names one command's brace expressions may give (agents/braces.py)
_OPERATOR_CHARS = frozenset(";&|<>()\n")
_FOUND = "\ue001"  # find's {} while the command -exec runs is read
_QUOTED_PAREN = "\ue000"  # a '(' of '$(' in single quotes while the text is read (a private-use character)
_WORD_ENDS = frozenset(" \t\r\n;&|<>()")  # a '#' after one of these starts a comment


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


def write_targets(command: str, is_dir: Callable[[str], bool] | None = None,
                  read_list: Callable[[str], str | None] | None = None) -> ShellWrites:
    """Read ``command`` (shell text) and return the paths it will write.

    ``is_dir(path)`` says whether a path (as returned, relative to the command's working
    directory) is an existing folder; ``cp``/``mv``/``ln`` into a folder write
    ``folder/name``.  Without it only a trailing ``/`` marks a folder, so the result is
    a pure function of the text.  ``read_list(path)`` reads a list of names xargs is given
    (see ``ShellWrites.read_list``); without it those names are unknown.
    """
    result = ShellWrites(read_list=read_list)
    _read(command, is_dir or (lambda path: path.endswith("/")), result, "", 0)
    # A path some other writer names too is not a restore only.
    result.restores = [p for p in dict.fromkeys(result.restores) if result.targets.count(p) == result.restores.count(p)]
    # Keep first-seen order, drop repeats.
    result.targets = list(dict.fromkeys(result.targets))
    result.globs = list(dict.fromkeys(result.globs))
    return result


# Longest first: shlex hands over a run of operator characters as one token (");" or
# ">&"), which is cut here into the shell's operators.
_OPERATORS = sorted(
    ["&>>", "&>", ">>", ">|", "<>", "<<<", "<<-", "<<", ">&", "<&", "&&", "||", "|&", ";;&", ";;", ";&",
     "<(", ">(", ">", "<", "&", "|", ";", "(", ")", "\n"],
    key=len,
    reverse=True,
)


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(_backquotes_as_dollar(_cut_comments(_ansi_c_quoted(command))), posix=True, punctuation_chars=";&|<>()\n")
    lexer.commenters = ""  # shlex starts a comment at any '#', even inside a word: cut above
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    tokens: list[str] = []
    for token in lexer:
        if not token or not _OPERATOR_CHARS.issuperset(token):
            tokens.append(token)
            continue
        while token:
            operator = next(op for op in _OPERATORS if token.startswith(op))
            tokens.append(operator)
            token = token[len(operator) :]
    return tokens


def _read(command: str, is_dir, result: ShellWrites, base: str | None, depth: int) -> None:
    if not isinstance(command, str):
        result.note("the command is not text")
        return
    if len(command) > MAX_COMMAND_CHARS:
        result.note(f"the command is longer than {MAX_COMMAND_CHARS} characters")
        return
    command, bodies = _cut_heredocs(command)
    try:
        tokens = _tokens(command)
    except ValueError as exc:  # an unclosed quote or a trailing backslash
        result.note(f"the shell text cannot be split ({exc})")
        return
    bases: list[str | None] = [base]
    words: list[str] = []
    redirects: list[str] = []
    stdin: list[Stdin] = []  # what the simple command reads: '< FILE' or a here-document's body
    piped: list[list[str]] = []  # the words of the command piping into this one ('grep -rl x src | xargs ...')
    index = 0

    def finish(separator: str = "") -> None:
        if words or redirects:
            reading = Stdin(words=piped[-1]) if piped and not stdin else (stdin[-1] if stdin else None)
            bases[-1] = _simple_command(_unmarked(words), _unmarked(redirects), bases[-1], is_dir, result, depth, reading)
        piped[:] = [_unmarked(words)] if separator == "|" else []
        words.clear()
        redirects.clear()
        stdin.clear()

    while index < len(tokens):
        token = tokens[index]
        if token in _SEPARATORS:
            finish(token)
        elif token in ("(", "<(", ">("):
            finish()
            if token != "(":
                result.note("a process substitution runs a command at run time")
            elif index > 0 and tokens[index - 1] == "$":
                result.note("a command substitution $(...) is run at run time")
            bases.append(bases[-1])
        elif token == ")":
            finish()
            if len(bases) > 1:
                bases.pop()
        elif token in _WRITE_REDIRECTS or token in _READ_REDIRECTS or token in _DUP_REDIRECTS:
            if words and words[-1].isdigit():
                words.pop()  # '2>' arrives as '2' then '>': the 2 is a descriptor
            target = tokens[index + 1] if index + 1 < len(tokens) else None
            if target is None or _OPERATOR_CHARS.issuperset(target):
                result.note(f"a redirection {token!r} has no target")
            elif token in _WRITE_REDIRECTS or (token == ">&" and not _is_descriptor(target)):
                redirects.append(target)
                index += 1
            else:
                if token == "<" and (not words or not words[-1].isdigit()):
                    stdin.append(Stdin(file=target))
                index += 1  # a read, or a descriptor duplication: no file written
        elif token in _HEREDOCS:
            delimiter = tokens[index + 1] if index + 1 < len(tokens) else ""
            if not delimiter or _OPERATOR_CHARS.issuperset(delimiter):
                result.note(f"a here-document {token!r} without a delimiter")
            else:
                index += 1  # the delimiter; the body was cut out before splitting
                stdin.append(Stdin(text=bodies.pop(0) if bodies else ""))
        elif "$(" in token or "`" in token:
            result.note("a command substitution is run at run time")
            for script in _substitutions(token):  # "$(cmd)" quoted: one word, cmd still runs
                if depth >= _MAX_DEPTH:
                    result.note("command substitutions nested too deep to read")
                    break
                _read(script, is_dir, result, bases[-1], depth + 1)
            words.append(token)
        elif _OPERATOR_CHARS.issuperset(token):
            result.note(f"the shell operator {token!r} is not understood")
        else:
            words.append(token)
        index += 1
    finish()


def _ansi_c_quoted(command: str) -> str:
    """The command with each bare ``$'...'`` (ANSI-C quoting) written as the single-quoted
    text bash decodes it to (``$'a\\x62c'`` is ``'abc'``), and each bare ``$"..."`` (a
    translated string) as ``"..."``: ``shlex`` knows neither and would keep the ``$``.
    An unclosed ``$'`` is left as written (``shlex`` then says it cannot split it)."""
    if "$'" not in command and '$"' not in command:
        return command
    out: list[str] = []
    quote = ""
    index = start = 0
    while index < len(command):
        after, quote, bare = _shell_step(command, index, quote)
        if bare and command[index] == "$" and command.startswith("'", index + 1):
            end = index + 2
            while end < len(command) and command[end] != "'":
                end += 2 if command[end] == "\\" else 1
            if end >= len(command):
                break  # unclosed
            text = _ansi_c_decoded(command[index + 2 : end])
            out += [command[start:index], "'", text.replace("'", "'\\''"), "'"]
            index = start = end + 1
            continue
        if bare and command[index] == "$" and command.startswith('"', index + 1):
            out.append(command[start:index])
            start = index + 1  # $"text" is "text" (bash translates it only with a message catalogue)
        index = after
    out.append(command[start:])
    return "".join(out)


_ANSI_C_SIMPLE = {"a": b"\a", "b": b"\b", "e": b"\x1b", "E": b"\x1b", "f": b"\f", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v",
                  "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}
_ANSI_C_DIGITS = {"x": 2, "u": 4, "U": 8}  # the most hex digits each escape reads
_OCTAL = frozenset("01234567")
_HEX = frozenset("0123456789abcdefABCDEF")


def _ansi_c_decoded(text: str) -> str:
    """The text of ``$'text'`` as bash decodes it: ``\\n \\t \\\\ \\' \\"`` and the other
    C escapes, ``\\NNN`` (octal) and ``\\xHH`` (bytes), ``\\uHHHH`` / ``\\UHHHHHHHH``
    (characters), ``\\cX`` (control-X).  A malformed escape (``\\q``, ``\\x`` with no
    digit) stays as written, as in bash; a NUL byte ends the text, as in bash (a C string).
    Bytes that are no UTF-8 are kept as the file system's names hold them
    (``surrogateescape``)."""
    out = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out += _utf8(char)
            index += 1
            continue
        letter = text[index + 1]
        index += 2
        if letter in _ANSI_C_SIMPLE:
            out += _ANSI_C_SIMPLE[letter]
        elif letter in _OCTAL:
            digits = letter
            while len(digits) < 3 and index < len(text) and text[index] in _OCTAL:
                digits += text[index]
                index += 1
            out.append(int(digits, 8) & 0xFF)
        elif letter in _ANSI_C_DIGITS:
            most = _ANSI_C_DIGITS[letter]
            digits = ""
            while len(digits) < most and index < len(text) and text[index] in _HEX:
                digits += text[index]
                index += 1
            value = int(digits, 16) if digits else None
            if value is None or (letter != "x" and (value > 0x10FFFF or 0xD800 <= value <= 0xDFFF)):
                out += _utf8("\\" + letter + digits)  # malformed: kept as written
            elif letter == "x":
                out.append(value)
            else:
                out += chr(value).encode("utf-8")
        elif letter == "c" and index < len(text) and text[index].isascii():
            control = text[index]
            index += 1
            out.append(0x7F if control == "?" else ord(control.upper()) & 0x1F)
        else:
            out += _utf8("\\" + letter)
    return bytes(out).partition(b"\0")[0].decode("utf-8", "surrogateescape")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows one): no file name has it
        return text.encode("utf-8", "surrogatepass")


def _cut_comments(command: str) -> str:
    """The command without its comments: a ``#`` that starts a word, outside quotes, to
    the end of its line.  A ``#`` inside a word is text (``sed -i s#a#b# f``, ``a#b``),
    where ``shlex`` would end the line."""
    if "#" not in command:
        return command
    kept: list[str] = []
    quote = ""
    index = start = 0
    while index < len(command):
        after, quote, bare = _shell_step(command, index, quote)
        if bare and command[index] == "#" and (index == 0 or command[index - 1] in _WORD_ENDS):
            kept.append(command[start:index])
            end = command.find("\n", index)
            index = start = len(command) if end < 0 else end
            continue
        index = after
    kept.append(command[start:])
    return "".join(kept)


def _backquotes_as_dollar(command: str) -> str:
    """`cmd` written as $(cmd) (outside single quotes), so that its commands are read
    as those of any other substitution; an escaped \\` stays text.  A ``$(`` inside
    single quotes is text (``sed 's/$(OLD)/x/'``): its ``(`` becomes ``_QUOTED_PAREN``,
    put back in the words read (``_unmarked``)."""
    if ("`" not in command and "$(" not in command) or _QUOTED_PAREN in command:
        return command
    out: list[str] = []
    quote = ""
    opened = False
    index = 0
    while index < len(command):
        char = command[index]
        if char == "\\" and quote != "'":
            out.append(command[index : index + 2])
            index += 2
            continue
        if char == "'" and quote != '"' and not opened:
            quote = "" if quote == "'" else "'"
        elif char == '"' and quote != "'" and not opened:
            quote = "" if quote == '"' else '"'
        elif char == "`" and quote != "'":
            char = ")" if opened else "$("
            opened = not opened
        elif char == "(" and quote == "'" and index > 0 and command[index - 1] == "$":
            char = _QUOTED_PAREN
        out.append(char)
        index += 1
    return "".join(out)


def _unmarked(words: list[str]) -> list[str]:
    """The words as the command has them (see ``_backquotes_as_dollar``)."""
    return [word.replace(_QUOTED_PAREN, "(") for word in words]


def _substitutions(word: str) -> list[str]:
    """The scripts of the ``$(...)`` in one word (a quoted one: ``"$(cmd)"``), outermost
    first; a ``(`` left open runs to the end of the word."""
    scripts: list[str] = []
    index = word.find("$(")
    while index >= 0:
        depth, end = 0, index + 1
        while end < len(word):
            if word[end] == "(":
                depth += 1
            elif word[end] == ")":
                depth -= 1
                if depth == 0:
                    break
            end += 1
        scripts.append(word[index + 2 : end])
        index = word.find("$(", end)
    return scripts


def _heredocs_in(line: str) -> list[tuple[str, str]]:
    """The (strip-tabs flag, delimiter) of each here-document a line opens: a ``<<``
    outside quotes ('<<0' quoted is a file name, not a here-document)."""
    found = []
    quote = ""
    index = 0
    while index < len(line):
        after, quote, bare = _shell_step(line, index, quote)
        if bare and line[index] == "#" and (index == 0 or line[index - 1] in _WORD_ENDS):
            break  # a comment
        if bare and line.startswith("<<", index) and not line.startswith("<<<", index) and (index == 0 or line[index - 1] != "<"):
            opened = _heredoc_at(line, index)
            if opened is not None:
                found.append(opened[:2])
                index = opened[2]
                continue
        index = after
    return found


def _shell_step(text: str, index: int, quote: str) -> tuple[int, str, bool]:
    """Read ``text[index]`` as the shell does: (the index after it and what it escapes,
    the quote open after it, whether it is bare: outside quotes, not escaped, no quote)."""
    char = text[index]
    if quote:
        if char == quote:
            return index + 1, "", False
        return index + (2 if char == "\\" and quote == '"' else 1), quote, False
    if char == "\\":
        return index + 2, "", False
    if char in "'\"":
        return index + 1, char, False
    return index + 1, "", True


def _heredoc_at(line: str, index: int) -> tuple[str, str, int] | None:
    """The here-document opened by the ``<<`` at ``index``: (``-`` or '', its delimiter,
    the index after it).  The delimiter is a shell word with its quotes removed, as bash
    compares it (``<<E\\OF``, ``<<'EOF'``, ``<<"E"OF`` all end at a line ``EOF``)."""
    index += 2
    strip = ""
    if line.startswith("-", index):
        strip, index = "-", index + 1
    while index < len(line) and line[index] in " \t":
        index += 1
    word: list[str] = []
    quote = ""
    while index < len(line):
        char = line[index]
        if quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"' and index + 1 < len(line) and line[index + 1] in '\\"$`':
                index += 1
                word.append(line[index])
            else:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == "\\" and index + 1 < len(line):
            index += 1
            word.append(line[index])
        elif char in _WORD_ENDS:
            break
        else:
            word.append(char)
        index += 1
    return (strip, "".join(word), index) if word else None


def _cut_heredocs(command: str) -> tuple[str, list[str]]:
    """The command without here-document bodies (they are data, not commands, and may
    hold any text: an apostrophe would stop ``shlex``), and the bodies in order (a
    diff given to ``git apply`` or ``patch`` is read)."""
    if "<<" not in command:
        return command, []
    lines = command.split("\n")
    kept: list[str] = []
    bodies: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        kept.append(line)
        index += 1
        for strip_tabs, delimiter in _heredocs_in(line):
            start = index
            while index < len(lines):
                body = lines[index]
                index += 1
                if (body.lstrip("\t") if strip_tabs else body) == delimiter:
                    break
            bodies.append("\n".join(lines[start : index - 1 if index > start else start]) + "\n")
    return "\n".join(kept), bodies


def _is_descriptor(word: str) -> bool:
    return word.isdigit() or word == "-" or (word.endswith("-") and word[:-1].isdigit())


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


def _simple_command(words: list[str], redirects: list[str], base: str | None, is_dir, result: ShellWrites, depth: int,
                    stdin: Stdin | None = None) -> str | None:
    """Record one simple command's targets; return the ``cd`` base after it."""
    for target in redirects:
        _add(target, base, result)
    args = list(words)
    # Compound-command keywords and assignments come before the command word.
    while args and (args[0] in _KEYWORDS or _is_assignment(args[0])):
        args.pop(0)
    here = base  # where the command runs: env -C / sudo -D move it, not the shell
    while args and posixpath.basename(args[0]) in _WRAPPERS:
        wrapper = posixpath.basename(args.pop(0))
        args, values = _after_wrapper_options(wrapper, args)
        for option, value in values:
            if wrapper == "time" and option in ("-o", "--output"):
                _add(value, here, result)  # GNU time writes its report there
            elif (wrapper, option) in (("env", "-C"), ("env", "--chdir"), ("sudo", "-D"), ("sudo", "--chdir")):
                here = _cd([value], here, result)
            elif wrapper == "env" and option in ("-S", "--split-string"):
                try:
                    args = shlex.split(value) + args  # env -S 'tee f': the string is words
                except ValueError as exc:
                    result.note(f"env -S text cannot be split ({exc})")
                    return base
        while args and _is_assignment(args[0]):
            args.pop(0)
    if not args or args[0] in _NOT_COMMANDS:
        return base
    if here != base:
        _command(args, here, is_dir, result, depth, stdin)
        return base
    return _command(args, base, is_dir, result, depth, stdin)


def _command(args: list[str], base: str | None, is_dir, result: ShellWrites, depth: int, stdin: Stdin | None = None) -> str | None:
    """Record the targets of the command ``args`` (its command word first), run in
    ``base``; return the ``cd`` base after it."""
    name, rest = posixpath.basename(args[0]), args[1:]
    if name in ("cd", "pushd"):
        return _cd(rest, base, result)
    if name == "popd":
        result.note("popd returns to a folder known only at run time")
        return None
    if name == "eval" and depth < _MAX_DEPTH:
        script = " ".join(rest)  # eval joins its words and runs them: read what it runs
        if "$" in script or "`" in script:
            result.note(_OPAQUE[name])
        _read(script, is_dir, result, base, depth + 1)
        return base
    if name == "xargs":
        _xargs(rest, base, is_dir, result, depth, stdin)
        return base
    if name in _OPAQUE:
        result.note(_OPAQUE[name])
        return base
    formatter = formatter_writes(args, lambda operand: (joined := _join(base, operand)) is not None and is_dir(joined))
    if formatter is not None:
        _formatted(formatter, base, result)
        return base
    handler = _WRITERS.get(name)
    if name == "patch":
        _patch(rest, base, is_dir, result, stdin)
    elif handler is not None:
        handler(rest, base, is_dir, result)
    elif name in ("bash", "sh", "zsh", "dash", "ksh"):
        _shell(rest, base, is_dir, result, depth)
    elif name == "git":
        return _git(rest, base, is_dir, result, stdin)
    elif name == "find" and any(word in ("-exec", "-execdir", "-delete", "-ok", "-okdir", "-fprint") for word in rest):
        result.note("find -exec/-delete acts on files found at run time")
        _find(rest, base, is_dir, result, depth)
    return base


def _writes_found(command: list[str], base: str | None, is_dir, result: ShellWrites, depth: int, append: bool) -> bool:
    """Whether ``command`` (``_FOUND`` standing for a file found at run time, or appended
    when ``append``) writes that file (``sed -i``, ``rm``, a formatter); what it writes
    besides is added to ``result``."""
    if not command or depth >= _MAX_DEPTH:
        return False
    probe = ShellWrites(braced=result.braced)
    _command(command + [_FOUND] if append else command, base, is_dir, probe, depth + 1)
    for path in probe.targets:
        if _FOUND not in path:
            _add(path, base, result)
    return _join(base, _FOUND) in probe.targets or bool(probe.unknown)


def _xargs(args: list[str], base: str | None, is_dir, result: ShellWrites, depth: int, stdin: Stdin | None) -> None:
    """xargs runs a command on the names it reads.  From a list file (``xargs rm <
    list.txt``, ``xargs -a list.txt rm``, ``cat list.txt | xargs rm``) the caller reads
    them now (``ShellWrites.read_list``): the command is read with them as its operands.
    Otherwise, ``grep -rl x src | xargs sed -i ...``: the files xargs hands on come from
    the command before it; when that lists files under folders (``grep -r``/``rg``/``git
    grep``, ``find``, ``git ls-files``, ``ls``), those folders' files are candidates, as
    for find; else they are unknown."""
    index = 0
    replace = None
    list_files: list[str] = []
    separator: str | None = None  # None: blanks and newlines, with quotes (xargs's default)
    while index < len(args) and args[index].startswith("-") and args[index] != "--":
        option = args[index]
        key, equals, value = option.partition("=")
        if option in ("-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a", "--max-args", "--max-procs", "--delimiter", "--arg-file") and index + 1 < len(args):
            value = args[index + 1]
            if option == "-I":
                replace = value
            elif option in ("-a", "--arg-file"):
                list_files.append(value)
            elif option in ("-d", "--delimiter"):
                separator = _xargs_delimiter(value)
            index += 1
        elif option.startswith("-I") and len(option) > 2:
            replace = option[2:]
        elif option.startswith("--replace"):
            replace = value or "{}"
        elif option.startswith("-i"):
            replace = option[2:] or "{}"  # -i[STRING], the old spelling of -I
        elif key == "--arg-file" and equals:
            list_files.append(value)
        elif option.startswith("-a") and len(option) > 2:
            list_files.append(option[2:])
        elif key == "--delimiter" and equals or option.startswith("-d") and len(option) > 2:
            separator = _xargs_delimiter(value if equals else option[2:])
        elif option in ("-0", "--null"):
            separator = "\0"
        index += 1
    if index < len(args) and args[index] == "--":
        index += 1
    command = args[index:] or ["echo"]
    if replace is not None:
        command = [word.replace(replace, _FOUND) for word in command]
    if not list_files and stdin is not None:
        list_files = [stdin.file] if stdin.file is not None else _cat_files(stdin.words or [])
    names = _listed_names(list_files, base, separator, replace is not None, result) if list_files else None
    if names is not None and depth < _MAX_DEPTH:
        _command_on_names(command, names, replace is not None, base, is_dir, result, depth)
        return
    result.note(_OPAQUE["xargs"])
    if not _writes_found(command, base, is_dir, result, depth, append=replace is None):
        return
    folders = _listed_folders(stdin.words if stdin is not None and stdin.words else [])
    if folders is None:
        return  # files from somewhere unknown: the after-call comparison sees them
    folder_paths, suffixes = folders
    for folder in folder_paths:
        joined = _join(base, folder)
        if joined is None or "$" in folder or "`" in folder or _GLOB_CHARS & set(folder):
            result.note(f"xargs writes files listed from {folder!r}, known only at run time")
        else:
            result.formatted.append((posixpath.normpath(joined), suffixes))


def _xargs_delimiter(value: str) -> str | None:
    """xargs -d's character: one character, or a C escape (``\\n``, ``\\t``, ``\\0``, ``\\\\``);
    None (blanks, xargs's default) for one not read here."""
    escapes = {"\\n": "\n", "\\t": "\t", "\\0": "\0", "\\\\": "\\", "\\r": "\r"}
    if len(value) == 1:
        return value
    return escapes.get(value)


def _cat_files(words: list[str]) -> list[str]:
    """The files ``cat FILE...`` (no option: ``cat -n`` changes the text) prints."""
    if not words or posixpath.basename(words[0]) != "cat" or len(words) < 2:
        return []
    files = words[1:]
    return [] if any(word.startswith("-") for word in files) else files


def _listed_names(files: list[str], base: str | None, separator: str | None, lines: bool, result: ShellWrites) -> list[str] | None:
    """The names xargs reads from the list ``files`` (joined onto ``base``), split as
    xargs splits them: at ``separator``, by lines (``-I``), or at blanks and newlines
    with quotes and backslashes read; None (noted) when a file cannot be read (missing,
    not a regular file, over ``MAX_LIST_BYTES``, built at run time) or they hold more
    than ``MAX_LIST_NAMES`` names."""
    if result.read_list is None:
        return None
    names: list[str] = []
    for file in files:
        joined = _join(base, posixpath.expanduser(file)) if not ("$" in file or "`" in file or _GLOB_CHARS & set(file)) else None
        text = result.read_list(joined) if joined is not None else None
        if text is None:
            result.note(f"xargs reads its names from {file!r}, which cannot be read now")
            return None
        if separator is not None:
            found = text.split(separator)
        else:
            try:
                found = [_unquoted(line.lstrip(" \t")) for line in text.split("\n")] if lines else shlex.split(text)
            except ValueError:  # an unclosed quote: xargs refuses the list too
                result.note(f"xargs cannot split the names in {file!r}")
                return None
        names += [name for name in found if name]
        if len(names) > MAX_LIST_NAMES:
            result.note(f"xargs reads more than {MAX_LIST_NAMES} names from {file!r}")
            return None
    return names


def _unquoted(line: str) -> str:
    """One line of an xargs -I list as one name: its quotes and backslashes read, its
    blanks kept."""
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace, lexer.whitespace_split, lexer.commenters = "", True, ""
    return "".join(lexer)


_NAME_OPEN, _NAME_CLOSE = "\ue002", "\ue003"  # around the number of a listed name while the command is read
_EXPANDED_CHARS = frozenset("$`{~*?[\0")  # what the reading of a target would expand or refuse
_NAME_MARK = re.compile(f"{_NAME_OPEN}(\\d+){_NAME_CLOSE}")


def _command_on_names(command: list[str], names: list[str], replace: bool, base: str | None, is_dir, result: ShellWrites,
                      depth: int) -> None:
    """Read ``command`` as xargs runs it on ``names``: appended to it, or put in the place
    of ``_FOUND`` (``-I``), once per name.  Each name stands in as a mark while the
    command is read, then is put back: a listed name is literal (no ``$``, brace or glob
    of the shell touches it)."""
    probe = ShellWrites(braced=result.braced)
    # A mark stands for the last part of a name only, so that what a command does with
    # its folder (``cp -t``'s or ``mv``'s basename) sees the folder; a folder the shell
    # reading would expand (``$``, braces, a glob) is no folder here: the whole name is marked.
    marks: list[str] = []
    shown: list[str] = []  # what each mark is put back as
    for number, name in enumerate(names):
        folder, _, last = name.rpartition("/")
        whole = not folder or not last or bool(set(folder) & _EXPANDED_CHARS)
        marks.append(f"{_NAME_OPEN}{number}{_NAME_CLOSE}" if whole else f"{folder}/{_NAME_OPEN}{number}{_NAME_CLOSE}")
        shown.append(name if whole else last)
    if replace:
        for mark in marks:
            _command([word.replace(_FOUND, mark) for word in command], base, is_dir, probe, depth + 1)
    else:
        _command(command + marks, base, is_dir, probe, depth + 1)

    def named(text: str) -> str:
        return _NAME_MARK.sub(lambda found: shown[int(found.group(1))], text)

    result.braced = probe.braced
    for path in probe.targets:
        real = named(path)
        if real == path:
            result.targets.append(path)
        elif not (real.startswith("/") and (posixpath.normpath(real) + "/").startswith("/dev/")):
            result.targets.append(real)
    result.globs += [named(path) for path in probe.globs]
    result.restores += [named(path) for path in probe.restores]
    result.formatted += [(named(folder), suffixes) for folder, suffixes in probe.formatted]
    for diff in probe.diffs:
        diff.file = named(diff.file) if diff.file is not None else None
        result.diffs.append(diff)
    for reason in probe.unknown:
        result.note(named(reason))


def _listed_folders(words: list[str]) -> tuple[list[str], tuple[str, ...]] | None:
    """The folders (and name suffixes) under which the command ``words`` lists files, if it
    is one that lists files; None otherwise."""
    if not words:
        return None
    name, rest = posixpath.basename(words[0]), words[1:]
    if name == "git" and rest[:1] in (["grep"], ["ls-files"]):
        name, rest = f"git {rest[0]}", rest[1:]
    operands = [word for word in rest if not word.startswith("-")]
    globs = [word.partition("=")[2] for word in rest if word.startswith(("--include=", "--glob=", "-g"))]
    if name in ("grep", "egrep", "rg", "ag", "git grep"):
        if not any(flag in word for word in rest if word.startswith("-") and not word.startswith("--") for flag in "lL") \
                and not {"--files-with-matches", "--files-without-match", "--files"} & set(rest):
            return None  # it prints lines, not file names
        operands = operands[1:] if not any(word in ("-e", "-f", "--regexp", "--file", "--files") for word in rest) else operands
    elif name == "find":
        operands = [word for word in rest[: next((i for i, w in enumerate(rest) if w.startswith("-") or w in ("(", "!")), len(rest))]]
        globs += [rest[i + 1] for i, word in enumerate(rest[:-1]) if word in ("-name", "-iname")]
    elif name not in ("git ls-files", "ls", "fd", "fdfind"):
        return None
    suffixes = tuple(glob[1:] for glob in globs if glob.startswith("*") and glob[1:] and not _GLOB_CHARS & set(glob[1:]))
    if not suffixes or len(suffixes) != len(globs):
        suffixes = ("",)
    return operands or ["."], suffixes


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_VALUES = frozenset({"-name", "-iname", "-path", "-ipath", "-wholename", "-regex", "-iregex", "-type", "-maxdepth", "-mindepth",
                          "-newer", "-size", "-mtime", "-mmin", "-atime", "-ctime", "-user", "-group", "-perm", "-fprint", "-fprintf",
                          "-printf", "-fls", "-used", "-samefile", "-links", "-inum", "-xtype", "-fstype", "-context"})


def _find(args: list[str], base: str | None, is_dir, result: ShellWrites, depth: int) -> None:
    """find DIR... -delete, or -exec a writing command on ``{}``: the files under DIR (with
    the suffixes of its ``-name '*.py'`` tests, else all) may be written; they are handed
    on as candidates (``formatted``), checked against other agents' claims, not claimed.
    What the command writes besides ``{}`` is read as any command's."""
    starts: list[str] = []
    index = 0
    while index < len(args) and not args[index].startswith("-") and args[index] not in ("(", "!", ","):
        starts.append(args[index])
        index += 1
    names: list[str] = []
    writes = False
    while index < len(args):
        word = args[index]
        if word in _FIND_EXEC:
            end = next((i for i in range(index + 1, len(args)) if args[i] in (";", "+")), len(args))
            command = [word.replace("{}", _FOUND) for word in args[index + 1 : end]]
            writes = _writes_found(command, base, is_dir, result, depth, append=False) or writes
            index = end + 1
            continue
        if word == "-delete":
            writes = True
        elif word in ("-name", "-iname") and index + 1 < len(args):
            names.append(args[index + 1])
        if word in _FIND_VALUES:
            index += 1
        index += 1
    if not writes or any(word == "-type" and kind == "d" for word, kind in zip(args, args[1:])):
        return  # -type d: folders only (find . -type d -empty -delete), no file's content
    suffixes = tuple(name[1:] for name in names if name.startswith("*") and not _GLOB_CHARS & set(name[1:]) and name[1:])
    if len(suffixes) != len(names) or not suffixes:
        suffixes = ("",)  # a test we do not read (or none): any file there
    for start in starts or ["."]:
        joined = _join(base, start)
        if joined is None or "$" in start or "`" in start or _GLOB_CHARS & set(start):
            result.note(f"find starts at {start!r}, known only at run time")
        else:
            result.formatted.append((posixpath.normpath(joined), suffixes))


def _formatted(found: FormatterWrites, base: str | None, result: ShellWrites) -> None:
    for path in found.files:
        _add(path, base, result)
    for folder in found.folders:
        joined = _join(base, folder)
        if joined is None or "$" in folder or "`" in folder or _GLOB_CHARS & set(folder):
            _add(folder, base, result)  # its reason, or a glob the caller expands
        else:
            result.formatted.append((posixpath.normpath(joined), found.suffixes))


def _is_assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier()


def _after_wrapper_options(wrapper: str, args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Drop a wrapper's own options (``sudo -u x``, ``timeout -s KILL 5``, ``nice -n 5``);
    return the words after them and the (option, value) pairs they gave, a value glued
    on with ``=`` (``--chdir=sub``) split off."""
    takes_value = _WRAPPER_VALUES.get(wrapper, frozenset())
    values: list[tuple[str, str]] = []
    while args and args[0].startswith("-") and args[0] != "--":
        option = args.pop(0)
        if option.startswith("--") and "=" in option:
            key, _, value = option.partition("=")
            values.append((key, value))
        elif option in takes_value and args:
            values.append((option, args.pop(0)))
        elif len(option) > 2 and not option.startswith("--") and option[:2] in takes_value:
            values.append((option[:2], option[2:]))  # -sKILL, -Csub, -oL
    if args and args[0] == "--":
        args.pop(0)
    if wrapper == "timeout" and args:
        args.pop(0)  # the duration
    return args, values


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


def _each(args, base, is_dir, result, value_options=frozenset()):
    operands, _ = _operands(args, value_options)
    if not operands:
        result.note("a writing command names no file (an operator where its file should be?)")
    for operand in operands:
        _add(operand, base, result)


def _tee(args, base, is_dir, result):
    _each(args, base, is_dir, result, frozenset({"--output-error"}))


def _touch(args, base, is_dir, result):
    _each(args, base, is_dir, result, frozenset({"-d", "-r", "-t", "--date", "--reference"}))


def _mkdir(args, base, is_dir, result):
    _each(args, base, is_dir, result, frozenset({"-m", "--mode"}))


def _rm(args, base, is_dir, result):
    _each(args, base, is_dir, result)


def _truncate(args, base, is_dir, result):
    _each(args, base, is_dir, result, frozenset({"-s", "-r", "--size", "--reference"}))


def _chmod(args, base, is_dir, result):
    operands, options = _operands(args, frozenset({"--reference"}))
    if "--reference" not in options and operands:
        operands = operands[1:]  # the mode
    for operand in operands:
        _add(operand, base, result)


def _copy_like(args, base, is_dir, result, *, moves: bool, value_options=frozenset({"-t", "--target-directory", "-S", "--suffix"}),
               links: bool = False):
    """cp/mv/ln/install: the destination (folder/name when it is a folder, unless -T, or
    ln -n for a link to a folder: ``ln -sfn new current`` replaces the link); mv also
    deletes its sources; ``ln -s TARGET`` alone makes ./basename."""
    operands, options = _operands(args, value_options)
    operands = _brace_expanded(operands, result)  # cp f{,.bak} is cp f f.bak: two operands
    if operands is None:
        return
    letters = "".join(option[1:] for option in options if not option.startswith("--"))
    whole = "T" in letters or "--no-target-directory" in options or (links and ("n" in letters or "--no-dereference" in options))
    folder = options.get("-t") or options.get("--target-directory")
    if folder is not None:
        sources, destination, into = operands, folder, True
    elif len(operands) >= 2:
        sources, destination = operands[:-1], operands[-1]
        joined = _join(base, destination)
        into = len(sources) > 1 or (not whole and joined is not None and is_dir(joined))
    elif links and operands and posixpath.basename(operands[0].rstrip("/")):
        _add(posixpath.basename(operands[0].rstrip("/")), base, result)
        return
    else:
        if operands:
            result.note("a copy or move without a destination")
        return
    if moves:
        for source in sources:
            _add(source, base, result)
    if into:
        for source in sources:
            name = posixpath.basename(source.rstrip("/"))
            _add(posixpath.join(destination, name) if name else destination, base, result)
    else:
        _add(destination, base, result)


def _cp(args, base, is_dir, result):
    _copy_like(args, base, is_dir, result, moves=False)


def _ln(args, base, is_dir, result):
    _copy_like(args, base, is_dir, result, moves=False, links=True)


def _mv(args, base, is_dir, result):
    _copy_like(args, base, is_dir, result, moves=True)


def _install(args, base, is_dir, result):
    operands, options = _operands(args, frozenset({"-m", "-o", "-g", "-t", "-S", "--mode", "--owner", "--group", "--target-directory"}))
    if "-d" in options or "--directory" in options:
        for operand in operands:
            _add(operand, base, result)
        return
    _copy_like(args, base, is_dir, result, moves=False, value_options=frozenset({"-m", "-o", "-g", "-t", "-S"}))


def _dd(args, base, is_dir, result):
    for word in args:
        if word.startswith("of="):
            _add(word[3:], base, result)


def _getopt(args: list[str], short_values: str, long_values: frozenset[str] = frozenset()) -> tuple[list[tuple[str, str | None]], list[str]]:
    """(each option with its value, None for a flag; the operands), getopt's way: a short
    option in ``short_values`` takes the rest of its cluster or the next word (``-so
    out``, ``-oout``); a long one ``--opt=value``, or the next word if in ``long_values``;
    ``--`` ends the options."""
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


def _output_writer(short_values: str, outputs: tuple[str, ...], long_values: set[str] = frozenset(), unnamed: str = ""):
    """A command that writes the file an option names (``sort -o F``, ``curl -o F``);
    ``unnamed``: why it may write a file named otherwise (``wget URL``), noted when no
    such option is given."""
    takes_value = frozenset(long_values) | {name for name in outputs if name.startswith("--")}

    def handler(args, base, is_dir, result):
        written = _values(_getopt(args, short_values, takes_value)[0], *outputs)
        for path in written:
            if path != "-":  # stdout
                _add(path, base, result)
        if not written and unnamed:
            result.note(unnamed)

    return handler


_CURL_VALUES = frozenset({"--output", "--dump-header", "--cookie-jar", "--trace", "--trace-ascii", "--stderr", "--data", "--header",
                          "--request", "--user", "--url", "--output-dir", "--config", "--user-agent", "--referer", "--cookie",
                          "--form", "--upload-file", "--max-time", "--write-out", "--proxy", "--range", "--cert"})


def _curl(args, base, is_dir, result):
    options, _ = _getopt(args, "oDcdHXuAebTFmwxrCEKQtYyzPU", _CURL_VALUES)
    for path in _values(options, "-o", "--output", "-D", "--dump-header", "-c", "--cookie-jar", "--trace", "--trace-ascii", "--stderr"):
        if path != "-":
            _add(path, base, result)
    if any(option in ("-O", "--remote-name", "--remote-name-all") for option, _ in options):
        result.note("curl -O names its file after the URL")


def _uniq(args, base, is_dir, result):
    _, operands = _getopt(args, "fsw", frozenset({"--skip-fields", "--skip-chars", "--check-chars"}))
    if len(operands) >= 2 and operands[1] != "-":
        _add(operands[1], base, result)  # uniq INPUT OUTPUT


_PATCH_VALUES = frozenset({"--input", "--strip", "--prefix", "--reject-file", "--suffix", "--output", "--directory", "--backup-if-mismatch"})


def _patch(args, base, is_dir, result, stdin: Stdin | None = None):
    """patch FILE [PATCH], or -o OUTPUT: that file (in -d DIR); else the files its diff
    names (-i PATCH, a second operand, or standard input)."""
    options, operands = _getopt(args, "oidpBFDrVYzg", _PATCH_VALUES)
    here = base
    for folder in _values(options, "-d", "--directory"):
        here = _cd([folder], here, result)
    written = _values(options, "-o", "--output") or operands[:1]
    for path in written:
        if path != "-":
            _add(path, here, result)
    if written or here is None:
        if here is None:
            result.note("patch runs in a folder known only at run time")
        return
    strips = _values(options, "-p", "--strip")
    strip = int(strips[-1]) if strips and strips[-1].isdigit() else None
    given = _values(options, "-i", "--input")
    _diff(Stdin(file=given[-1]) if given else stdin, strip, base, here, False, "", result, "patch")


_RSYNC_VALUES = frozenset({"--rsh", "--exclude", "--include", "--filter", "--exclude-from", "--include-from", "--files-from", "--chmod",
                           "--chown", "--backup-dir", "--suffix", "--log-file", "--temp-dir", "--partial-dir", "--compare-dest",
                           "--link-dest", "--copy-dest", "--port", "--password-file", "--rsync-path"})


def _rsync(args, base, is_dir, result):
    """rsync SRC... DEST: DEST/name, or DEST itself for SRC/ (what is in SRC); host:path is
    another machine."""
    options, operands = _getopt(args, "efBTM", _RSYNC_VALUES)
    for path in _values(options, "--log-file"):
        _add(path, base, result)
    if len(operands) < 2:
        return
    destination = operands[-1]
    if ":" in destination.split("/", 1)[0]:
        return
    joined = _join(base, destination)
    for source in operands[:-1]:
        name = "" if source.endswith("/") else posixpath.basename(source)
        into = destination.endswith("/") or len(operands) > 2 or (joined is not None and is_dir(joined))
        _add(posixpath.join(destination, name) if into and name else destination, base, result)


_COMPRESSED = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst", "lzma": ".lzma"}
_DECOMPRESSORS = {"gunzip": "gzip", "bunzip2": "bzip2", "unxz": "xz", "unzstd": "zstd", "unlzma": "lzma"}


def _compressor(name: str):
    """gzip f writes f.gz and removes f; gunzip f.gz the other way round; -c writes stdout."""
    suffix = _COMPRESSED[_DECOMPRESSORS.get(name, name)]

    def handler(args, base, is_dir, result):
        options, operands = _getopt(args, "SbT", frozenset({"--suffix", "--threads"}))
        given = {option for option, _ in options}
        if given & {"-c", "--stdout", "--to-stdout", "-t", "--test", "-l", "--list"}:
            return
        ending = (_values(options, "-S", "--suffix") or [suffix])[-1]
        decompress = name in _DECOMPRESSORS or bool(given & {"-d", "--decompress", "--uncompress"})
        keeps = bool(given & {"-k", "--keep"})
        for operand in operands:
            if not keeps:
                _add(operand, base, result)  # replaced by the other one
            if not decompress:
                _add(operand + ending, base, result)
            elif operand.endswith(ending) and len(operand) > len(ending):
                _add(operand[: -len(ending)], base, result)

    return handler


def _tar(args, base, is_dir, result):
    """tar -c/-r/-u writes its archive (-f); tar -x writes what the archive holds."""
    words = list(args)
    if words and not words[0].startswith("-"):
        words[0] = "-" + words[0]  # tar czf out.tgz: the first word is options without '-'
    options, _ = _getopt(words, "fCbHKLNTVgX", frozenset({"--file", "--directory", "--exclude", "--transform", "--owner", "--group",
                                                          "--mode", "--format", "--files-from"}))
    given = {option for option, _ in options}
    if given & {"-x", "--extract", "--get"}:
        result.note("tar -x writes the files its archive holds")
    elif given & {"-c", "-r", "-u", "--create", "--append", "--update"}:
        for archive in _values(options, "-f", "--file"):
            if archive != "-":
                _add(archive, base, result)


def _unzip(args, base, is_dir, result):
    if not any(word in ("-l", "-t", "-p", "-v", "-Z", "-z") for word in args):
        result.note("unzip writes the files its archive holds")


def _gawk(args, base, is_dir, result):
    """gawk -i inplace PROGRAM FILE...: the files are rewritten (var=value operands set
    variables)."""
    options, operands = _getopt(args, "fvFilE", frozenset({"--include", "--file", "--assign", "--field-separator", "--load", "--exec"}))
    if not any(value in ("inplace", "inplace.awk") for value in _values(options, "-i", "--include")):
        return
    has_program = bool(_values(options, "-f", "--file", "-E", "--exec"))
    for operand in operands if has_program else operands[1:]:
        if not _is_assignment(operand):
            _add(operand, base, result)


def _in_place_files(args, base, result, in_place: Callable[[str], tuple[bool, bool, bool]]):
    """sed -i / perl -i: the file operands, if some option asks for in-place editing.

    ``in_place(cluster)`` -> (is in-place, gives the script, swallows the next word).
    """
    editing = False
    has_script = False
    operands: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            operands.extend(args[index + 1 :])
            break
        if word.startswith("--"):
            if word == "--in-place" or word.startswith("--in-place="):
                editing = True
            elif word in ("--expression", "--file") and index + 1 < len(args):
                has_script = True
                index += 1
            elif word.startswith(("--expression=", "--file=")):
                has_script = True
        elif word.startswith("-") and len(word) > 1:
            is_in_place, gives_script, takes_next = in_place(word[1:])
            editing = editing or is_in_place
            has_script = has_script or gives_script
            if takes_next:
                index += 1
        else:
            operands.append(word)
        index += 1
    if not editing:
        return
    if not has_script and operands:
        operands = operands[1:]  # the first operand is the script
    if not operands:
        result.note("an in-place edit names no file (an operator where its file should be?)")
    for operand in operands:
        _add(operand, base, result)


def _sed_cluster(cluster: str) -> tuple[bool, bool, bool]:
    """GNU sed: in ``-i[SUFFIX]`` the rest of the cluster is the backup suffix (so
    ``-ie`` is -i with suffix 'e'); ``-e``/``-f``/``-l`` take the rest or the next word."""
    for position, letter in enumerate(cluster):
        if letter == "i":
            return True, False, False
        if letter in "efl":
            return False, letter in "ef", position == len(cluster) - 1
    return False, False, False


def _perl_cluster(cluster: str) -> tuple[bool, bool, bool]:
    """perl: ``-i[SUFFIX]`` ends the cluster like sed's; ``-e``/``-E`` take the script."""
    for position, letter in enumerate(cluster):
        if letter == "i":
            return True, False, False
        if letter in "eE":
            # perl -pie is -p, -i with suffix 'e'; reached only when no 'i' came first.
            return False, True, position == len(cluster) - 1
        if letter in "IMmx":
            return False, False, position == len(cluster) - 1
    return False, False, False


def _sed(args, base, is_dir, result):
    """sed: with ``-i`` its file operands; and the files its script's ``w FILE`` command
    and the ``w FILE`` flag of ``s`` write (``sed -n '/x/w out.txt' f``), ``-i`` or not.
    A script in a ``-f`` file is not read."""
    _in_place_files(args, base, result, _sed_cluster)
    written, runs = _sed_written("\n".join(_sed_scripts(args)))
    for path in written:
        _add(path, base, result)
    if runs:
        result.note("sed's e command runs text as a shell command")


def _sed_scripts(args: list[str]) -> list[str]:
    """The script texts sed is given: each ``-e``/``--expression``, else its first operand
    (unless ``-f`` gives the script)."""
    scripts: list[str] = []
    from_file = False
    operands: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            operands += args[index + 1 :]
            break
        if word.startswith("--"):
            key, equals, value = word.partition("=")
            if key in ("--expression", "--file", "--line-length") and not equals and index + 1 < len(args):
                index += 1
                value, equals = args[index], "="
            if key == "--expression" and equals:
                scripts.append(value)
            from_file = from_file or key == "--file"
        elif word.startswith("-") and len(word) > 1:
            for position, letter in enumerate(word[1:], start=1):
                if letter == "i":
                    break  # the rest is the backup suffix
                if letter in "efl":
                    value = word[position + 1 :]
                    if not value and index + 1 < len(args):
                        index += 1
                        value = args[index]
                    if letter == "e":
                        scripts.append(value)
                    from_file = from_file or letter == "f"
                    break
        else:
            operands.append(word)
        index += 1
    if not scripts and not from_file and operands:
        scripts.append(operands[0])
    return scripts


def _sed_written(script: str) -> tuple[list[str], bool]:
    """The files a sed script writes (``w FILE``, ``W FILE``, the ``w FILE`` flag of
    ``s``: the name runs to the end of the line, GNU's rule), and whether it runs shell
    commands (the ``e`` command or flag).  The script is read command by command, its
    addresses, regular expressions and texts skipped, so a ``w`` inside them is no
    command (``s/w x/y/``, ``/w/d``)."""
    written: list[str] = []
    runs = False
    index, end = 0, len(script)
    while index < end:
        char = script[index]
        if char in " \t\n;{}!":
            index += 1
            continue
        if char == "#":
            index = _sed_line_end(script, index)
            continue
        index = _sed_address(script, index)
        if index < end and script[index] == ",":
            index = _sed_address(script, index + 1)
        while index < end and script[index] in " \t!":
            index += 1
        if index >= end:
            break
        command = script[index]
        index += 1
        if command in "wW":
            name, index = _sed_file_name(script, index)
            written.append(name)
        elif command in "rRaice":
            runs = runs or command == "e"
            index = _sed_line_end(script, index, continued=command in "aic")
        elif command in ":btT":
            while index < end and script[index] not in ";\n":
                index += 1
        elif command in "sy":
            if index >= end:
                break
            delimiter = script[index]
            index = _sed_delimited(script, _sed_delimited(script, index + 1, delimiter), delimiter)
            while command == "s" and index < end and script[index] not in ";\n}#":
                flag = script[index]
                if flag == "w":
                    name, index = _sed_file_name(script, index + 1)
                    written.append(name)
                    break
                runs = runs or flag == "e"
                index += 1
        # other commands are one letter (p d q 5 ...): what follows is read as the next one
    return [name for name in written if name], runs


def _sed_address(script: str, index: int) -> int:
    """The index after the sed address at ``index`` (none: ``index``): a number,
    ``first~step``, ``$``, ``+N``/``~N``, or ``/regex/`` or ``\\cregexc`` with flags."""
    end = len(script)
    if index < end and script[index] in "+~":
        index += 1
    if index < end and script[index].isdigit():
        while index < end and (script[index].isdigit() or script[index] == "~"):
            index += 1
    elif index < end and script[index] == "$":
        index += 1
    elif index < end and (script[index] == "/" or (script[index] == "\\" and index + 1 < end)):
        delimiter = "/" if script[index] == "/" else script[index + 1]
        index = _sed_delimited(script, index + (1 if delimiter == "/" and script[index] == "/" else 2), delimiter)
        while index < end and script[index] in "IM":
            index += 1
    return index


def _sed_delimited(script: str, index: int, delimiter: str) -> int:
    """The index after the ``delimiter`` that ends the part starting at ``index`` (a
    backslash escapes the next character)."""
    while index < len(script) and script[index] != delimiter:
        index += 2 if script[index] == "\\" else 1
    return index + 1


def _sed_file_name(script: str, index: int) -> tuple[str, int]:
    while index < len(script) and script[index] in " \t":
        index += 1
    line_end = script.find("\n", index)
    line_end = len(script) if line_end < 0 else line_end
    return script[index:line_end], line_end


def _sed_line_end(script: str, index: int, continued: bool = False) -> int:
    """The index of the newline that ends the text at ``index`` (a, i, c: a line ending in
    a backslash goes on)."""
    while True:
        line_end = script.find("\n", index)
        if line_end < 0:
            return len(script)
        if not (continued and script[index:line_end].endswith("\\")):
            return line_end
        index = line_end + 1


def _perl(args, base, is_dir, result):
    _in_place_files(args, base, result, _perl_cluster)


def _shell(args, base, is_dir, result, depth):
    operands, options = _operands(args)
    script_at = next((i for i, word in enumerate(args) if word == "-c" or (word.startswith("-") and not word.startswith("--") and "c" in word)), None)
    if script_at is None:
        if operands:
            result.note(f"the script {operands[0]!r} may write anything")
        return
    if script_at + 1 >= len(args):
        result.note("-c without a script")
        return
    if depth >= _MAX_DEPTH:
        result.note("shells nested too deep to read")
        return
    _read(args[script_at + 1], is_dir, result, base, depth + 1)


def _git(args, base, is_dir, result, stdin: Stdin | None = None) -> str | None:
    # git's own options before the verb: -C DIR re-bases, -c k=v is skipped.
    here = base
    while args and args[0].startswith("-"):
        option = args.pop(0)
        if option in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") and args:
            value = args.pop(0)
            if option == "-C":
                here = _cd([value], here, result)
            elif option in ("--git-dir", "--work-tree"):
                result.note(f"git {option} points elsewhere")
    if not args:
        return base
    verb, rest = args[0], args[1:]
    if verb == "checkout":
        if "--" in rest:
            paths = rest[rest.index("--") + 1 :]
            if not paths:
                result.note("git checkout -- names no file")
            put_back = rest[: rest.index("--")] in ([], ["HEAD"])  # from the index, or HEAD
            for path in paths:
                _add_restore(path, here, result) if put_back else _add(path, here, result)
        else:
            _checkout_without_separator(rest, here, result)
    elif verb == "restore":
        operands, options = _operands(rest, frozenset({"-s", "--source"}))
        staged_only = ("--staged" in options or "-S" in options) and not ("--worktree" in options or "-W" in options)
        put_back = options.get("--source", options.get("-s", "HEAD")) == "HEAD"
        if not staged_only:
            if not operands:
                result.note("git restore names no file")
            for path in operands:
                _add_restore(path, here, result) if put_back else _add(path, here, result)
    elif verb == "mv":
        _copy_like(rest, here, is_dir, result, moves=True, value_options=frozenset())
    elif verb == "rm":
        _each(rest, here, is_dir, result)
    elif verb in ("apply", "am"):
        _git_apply(verb, rest, here, result, stdin)
    elif verb in _GIT_MANY:
        result.note(f"git {verb} may rewrite any file")
    return base


def _checkout_without_separator(args: list[str], base: str | None, result: ShellWrites) -> None:
    """``git checkout`` without ``--``: one operand may be a branch to switch to (any file
    may change); with two or more, the first is the commit (or a file) and the rest are
    files written with its bytes (``git checkout main src/app.py``); with ``--ours`` /
    ``--theirs`` / ``--merge`` every operand is a file of a conflict."""
    operands, options = _operands(args, frozenset({"-b", "-B", "--orphan", "--conflict"}))
    if any(option.startswith("--pathspec-from-file") for option in options):
        result.note("git checkout --pathspec-from-file names its files in a file")
    if options.keys() & {"-b", "-B", "--orphan", "--detach"}:
        result.note("git checkout -b/--orphan/--detach switches branches and may rewrite any file")
    elif options.keys() & {"--ours", "--theirs", "-m", "--merge", "--conflict"}:
        for path in operands:
            _add(path, base, result)
    elif len(operands) >= 2:
        for path in operands[1:]:  # the commit's bytes: new content, unless it is HEAD's
            _add_restore(path, base, result) if operands[0] == "HEAD" else _add(path, base, result)
    else:
        result.note("git checkout without '--' may switch branches and rewrite any file")


def _git_apply(verb: str, args: list[str], base: str | None, result: ShellWrites, stdin: Stdin | None) -> None:
    """git apply/am: the files of the diff (its files, or standard input), from the
    worktree's top; --cached, --check and the summaries write no file."""
    options, operands = _getopt(args, "pC", frozenset({"--directory", "--exclude", "--include", "--whitespace", "--build-fake-ancestor"}))
    given = {option for option, _ in options}
    if given & {"--cached", "--check", "--stat", "--numstat", "--summary", "--abort", "--quit", "--show-current-patch"}:
        return
    if given & {"--continue", "--skip", "--resolved", "-r"} or verb == "am" and not operands and stdin is None:
        result.note(f"git {verb} may rewrite any file")
        return
    if base is None:
        result.note(f"git {verb} runs in a folder known only at run time")
        return
    strips = _values(options, "-p")
    strip = int(strips[-1]) if strips and strips[-1].isdigit() else 1
    directory = (_values(options, "--directory") or [""])[-1]
    sources = [Stdin(file=operand) for operand in operands if operand != "-"] or [stdin]
    for source in sources:
        _diff(source, strip, base, base, True, directory, result, f"git {verb}")


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


_WRITERS: dict[str, Callable] = {
    "tee": _tee,
    "sed": _sed,
    "gsed": _sed,
    "perl": _perl,
    "cp": _cp,
    "mv": _mv,
    "ln": _ln,
    "install": _install,
    "rm": _rm,
    "rmdir": _rm,
    "unlink": _rm,
    "shred": _rm,
    "touch": _touch,
    "mkdir": _mkdir,
    "truncate": _truncate,
    "dd": _dd,
    "sponge": _each,
    "sort": _output_writer("oktST", ("-o", "--output"), {"--key", "--field-separator", "--buffer-size", "--temporary-directory"}),
    "iconv": _output_writer("oft", ("-o", "--output"), {"--from-code", "--to-code"}),
    "wget": _output_writer("OoaPeitTwQUAB", ("-O", "--output-document"), {"--directory-prefix", "--output-file", "--append-output",
                           "--execute", "--input-file", "--tries", "--timeout", "--wait", "--user-agent", "--header"},
                           unnamed="wget names its file after the URL"),
    "curl": _curl,
    "uniq": _uniq,
    "patch": _patch,
    "rsync": _rsync,
    "tar": _tar,
    "unzip": _unzip,
    "gawk": _gawk,
    "awk": _gawk,
    **{name: _compressor(name) for name in [*_COMPRESSED, *_DECOMPRESSORS]},
    "chmod": _chmod,
}
