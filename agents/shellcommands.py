"""The commands the shell reading knows to write files, each with the files it writes:
``_WRITERS`` maps a command's name to its reading (``args, base, is_dir, result``), and
``_git`` / ``_patch`` read git's verbs and patch's diffs (see ``agents.shellwrites``
for the whole list and its rules).
"""

from __future__ import annotations

import posixpath
from typing import Callable

from agents.sedscripts import _sed_written
from agents.shelltargets import (
    ShellWrites,
    Stdin,
    _add,
    _add_restore,
    _brace_expanded,
    _cd,
    _diff,
    _getopt,
    _is_assignment,
    _join,
    _operands,
    _values,
)

_GIT_MANY = frozenset(
    {"reset", "stash", "apply", "am", "merge", "pull", "rebase", "switch", "cherry-pick", "revert", "clean", "worktree", "clone", "init", "submodule"}
)


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


def _sed_scripts(args: list[str]) -> list[str]:
    """The script texts sed is given: each ``-e``/``--expression``, else its first operand
    (unless ``-f`` gives the script)."""
    options, operands = _getopt(args, "efl", frozenset({"--expression", "--file", "--line-length"}), attached="i")
    scripts = _values(options, "-e", "--expression")
    if not scripts and not any(option in ("-f", "--file") for option, _ in options) and operands:
        scripts.append(operands[0])
    return scripts


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


def _perl(args, base, is_dir, result):
    _in_place_files(args, base, result, _perl_cluster)


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
