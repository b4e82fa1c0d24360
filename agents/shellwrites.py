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

This module reads command lists, simple commands, wrappers, ``xargs`` and ``find``; the
text is split into words by ``agents.shellwords``, targets are recorded by
``agents.shelltargets``, and the writing commands are read by ``agents.shellcommands``
(sed's scripts by ``agents.sedscripts``).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Callable

from agents.formatters import FormatterWrites, formatter_writes
from agents.shellcommands import _WRITERS, _git, _patch
from agents.shelltargets import (
    _GLOB_CHARS,
    ShellWrites,
    Stdin,
    _add,
    _cd,
    _is_assignment,
    _join,
    _operands,
)
from agents.shellwords import (
    _OPERATOR_CHARS,
    _cut_heredocs,
    _substitutions,
    _tokens,
    _unmarked,
)

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


_FOUND = "\ue001"  # find's {} while the command -exec runs is read


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


def _is_descriptor(word: str) -> bool:
    return word.isdigit() or word == "-" or (word.endswith("-") and word[:-1].isdigit())


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
