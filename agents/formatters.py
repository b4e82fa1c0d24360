"""Which files a formatter or fixer run from a shell will rewrite, read off its words.

``ruff format``, ``black .``, ``prettier --write src``, ``cargo fmt``: an agent runs
them all the time, and they rewrite files the shell reading (``agents.shellwrites``)
cannot see in the command's text.  Before this module only the after-call comparison
saw those writes, so a formatter rewrote a file another agent held and the model was
told afterwards.  Now the pre-tool hook names them first:

* a file operand (``black src/app.py``) is a write, like ``sed -i``'s: asked for and,
  when free, claimed;
* a folder operand (``ruff format src``), or the default folder of a tool run without
  operands (``ruff format``, ``cargo fmt``: the working folder), is the files *in* it
  that the tool formats (by suffix), which the caller lists with git (tracked and
  untracked files git does not ignore: what formatters format, and what Lockstep calls
  content).  Those are *candidates*: the tool rewrites only the ones that need it, so
  they are checked against other agents' claims (a held one refuses the call in
  ``parallel-strict``) but not claimed: the after-call comparison claims the files it
  actually changed.

Only invocations that write are read: ``black --check``, ``ruff format --diff``,
``prettier --check``, ``gofmt -l`` write nothing.  A tool this table does not know, or
options it does not know, are left to the after-call comparison, as before.  Runners
that start a tool (``python -m black``, ``uv run``, ``uvx``, ``npx``, ``poetry run``,
``pnpm exec``) are looked through.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FormatterWrites", "formatter_writes"]

PYTHON = (".py", ".pyi")
WEB = (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts", ".vue", ".svelte")
PRETTIER = WEB + (".json", ".jsonc", ".json5", ".css", ".scss", ".less", ".html", ".md", ".mdx", ".yaml", ".yml", ".graphql", ".gql", ".hbs")


@dataclass
class FormatterWrites:
    """``files`` it writes (as written), ``folders`` whose ``suffixes`` files it may
    rewrite (candidates), and ``tool`` for messages."""

    tool: str
    files: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    suffixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Spec:
    suffixes: tuple[str, ...]
    writes_with: frozenset[str] = frozenset()  # writes only with one of these (``-w``); empty: always
    check_only: frozenset[str] = frozenset()  # ... and never with one of these
    takes_value: frozenset[str] = frozenset()  # options followed by a value word
    default_folder: bool = False  # no operand: the working folder (else: stdin, nothing written)


_SPECS: dict[str, _Spec] = {
    "black": _Spec(
        PYTHON + (".ipynb",),
        check_only=frozenset({"--check", "--diff", "-c", "--code"}),
        takes_value=frozenset({"-l", "--line-length", "-t", "--target-version", "--config", "--include", "--exclude",
                               "--extend-exclude", "--force-exclude", "--stdin-filename", "-W", "--workers",
                               "--python-cell-magics", "--required-version", "--enable-unstable-feature"}),
    ),
    "ruff format": _Spec(
        PYTHON + (".ipynb",),
        check_only=frozenset({"--check", "--diff"}),
        takes_value=frozenset({"--config", "--target-version", "--line-length", "--exclude", "--extension", "--stdin-filename",
                               "--cache-dir", "--range"}),
        default_folder=True,
    ),
    "ruff check": _Spec(
        PYTHON + (".ipynb",),
        writes_with=frozenset({"--fix", "--unsafe-fixes"}),
        check_only=frozenset({"--diff", "--no-fix", "--watch"}),
        takes_value=frozenset({"--config", "--select", "--ignore", "--extend-select", "--extend-ignore", "--per-file-ignores",
                               "--fixable", "--unfixable", "--exclude", "--extend-exclude", "--target-version", "--line-length",
                               "--output-format", "-o", "--output-file", "--stdin-filename", "--cache-dir", "--extension",
                               "--dummy-variable-rgx", "--extend-fixable", "--extend-per-file-ignores"}),
        default_folder=True,
    ),
    "isort": _Spec(
        PYTHON,
        check_only=frozenset({"--check-only", "--check", "-c", "--diff", "--df", "--show-files", "--stdout", "-d"}),
        takes_value=frozenset({"--settings-path", "--settings-file", "--sp", "--settings", "-l", "--line-length", "-p",
                               "--project", "--profile", "-m", "--multi-line", "--skip", "-s", "--skip-glob", "--sg",
                               "--filter-files", "-j", "--jobs", "--py", "--python-version", "--src", "--src-path"}),
    ),
    "autopep8": _Spec(PYTHON, writes_with=frozenset({"-i", "--in-place"}), check_only=frozenset({"-d", "--diff"}),
                      takes_value=frozenset({"--max-line-length", "--select", "--ignore", "-a", "--aggressive", "-j", "--jobs",
                                             "--global-config", "--exclude", "--indent-size", "--line-range", "--range"})),
    "yapf": _Spec(PYTHON, writes_with=frozenset({"-i", "--in-place"}), check_only=frozenset({"-d", "--diff"}),
                  takes_value=frozenset({"--style", "-l", "--lines", "-e", "--exclude", "-p", "--parallel"})),
    "autoflake": _Spec(PYTHON, writes_with=frozenset({"-i", "--in-place"}), check_only=frozenset({"-c", "--check", "--check-diff"}),
                       takes_value=frozenset({"--imports", "--exclude", "-j", "--jobs", "--config"})),
    "prettier": _Spec(
        PRETTIER,
        writes_with=frozenset({"--write", "-w"}),
        check_only=frozenset({"--check", "-c", "--list-different", "-l"}),
        takes_value=frozenset({"--config", "--ignore-path", "--parser", "--plugin", "--print-width", "--tab-width",
                               "--trailing-comma", "--end-of-line", "--arrow-parens", "--prose-wrap", "--quote-props",
                               "--stdin-filepath", "--log-level", "--cache-location", "--cache-strategy"}),
    ),
    "eslint": _Spec(
        WEB,
        writes_with=frozenset({"--fix"}),
        check_only=frozenset({"--fix-dry-run"}),
        takes_value=frozenset({"-c", "--config", "--ext", "--ignore-path", "--ignore-pattern", "--rule", "--rulesdir",
                               "--plugin", "--parser", "--parser-options", "--env", "--global", "-f", "--format", "-o",
                               "--output-file", "--max-warnings", "--cache-location", "--cache-strategy", "--fix-type",
                               "--resolve-plugins-relative-to", "--stdin-filename"}),
        default_folder=True,
    ),
    "biome format": _Spec(PRETTIER, writes_with=frozenset({"--write", "--apply", "--fix"}),
                          takes_value=frozenset({"--config-path", "--stdin-file-path"}), default_folder=True),
    "biome check": _Spec(PRETTIER, writes_with=frozenset({"--write", "--apply", "--apply-unsafe", "--fix", "--unsafe"}),
                         takes_value=frozenset({"--config-path", "--stdin-file-path"}), default_folder=True),
    "biome lint": _Spec(PRETTIER, writes_with=frozenset({"--write", "--apply", "--apply-unsafe", "--fix", "--unsafe"}),
                        takes_value=frozenset({"--config-path", "--stdin-file-path"}), default_folder=True),
    "deno fmt": _Spec(WEB + (".json", ".jsonc", ".md", ".css", ".html", ".yaml", ".yml"), check_only=frozenset({"--check"}),
                      takes_value=frozenset({"--config", "-c", "--ext", "--ignore", "--line-width", "--indent-width"}),
                      default_folder=True),
    "gofmt": _Spec((".go",), writes_with=frozenset({"-w"}), check_only=frozenset({"-l", "-d"}), takes_value=frozenset({"-r"})),
    "goimports": _Spec((".go",), writes_with=frozenset({"-w"}), check_only=frozenset({"-l", "-d"}), takes_value=frozenset({"-local"})),
    "go fmt": _Spec((".go",), check_only=frozenset({"-n"}), default_folder=True),
    "rustfmt": _Spec((".rs",), check_only=frozenset({"--check"}),
                     takes_value=frozenset({"--edition", "--config-path", "--config", "--emit", "--color", "--print-config"})),
    "cargo fmt": _Spec((".rs",), check_only=frozenset({"--check"}),
                       takes_value=frozenset({"-p", "--package", "--manifest-path", "--message-format"}), default_folder=True),
    "clang-format": _Spec((".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".m", ".mm", ".proto", ".java"),
                          writes_with=frozenset({"-i"}), check_only=frozenset({"--dry-run", "-n"}),
                          takes_value=frozenset({"--style", "-style", "--assume-filename", "--lines", "--offset", "--length",
                                                 "--fallback-style"})),
    "shfmt": _Spec((".sh", ".bash"), writes_with=frozenset({"-w", "--write"}), check_only=frozenset({"-l", "-d", "--diff", "--list"}),
                   takes_value=frozenset({"-i", "--indent", "-ln", "--language-dialect", "--filename"})),
    "terraform fmt": _Spec((".tf", ".tfvars"), check_only=frozenset({"-check", "-diff", "-list=false", "-write=false"}),
                           default_folder=True),
    "rubocop": _Spec((".rb",), writes_with=frozenset({"-a", "-A", "--autocorrect", "--autocorrect-all", "--auto-correct",
                                                      "--auto-correct-all", "-x", "--fix-layout"}),
                     takes_value=frozenset({"-c", "--config", "--only", "--except", "-f", "--format", "-o", "--out", "-r", "--require"}),
                     default_folder=True),
}

# Tools named by two words (``ruff format``): the first word and the subcommands it has here.
_SUBCOMMANDS = {"ruff": {"format", "check"}, "biome": {"format", "check", "lint"}, "deno": {"fmt"}, "go": {"fmt"},
                "cargo": {"fmt"}, "terraform": {"fmt"}}
# Words that run the tool after them: ``python -m black``, ``uv run ruff``, ``npx prettier``.
_RUNNERS = {"uvx": 0, "npx": 0, "bunx": 0, "pipx": 1, "poetry": 1, "pdm": 1, "hatch": 1, "uv": 1, "pnpm": 1, "yarn": 0, "bun": 1}
_RUNNER_VERBS = {"run", "exec", "dlx", "x"}


def _unwrap(words: list[str]) -> list[str]:
    """The tool's own words, past runners that start it (at most a few levels)."""
    for _ in range(4):
        if not words:
            return words
        name = posixpath.basename(words[0])
        if name.startswith("python") and len(words) >= 3 and words[1] == "-m":
            words = words[2:]
        elif name in _RUNNERS:
            rest = words[1:]
            if _RUNNERS[name]:  # "uv run X", "pnpm exec X": the verb first
                if not rest or rest[0] not in _RUNNER_VERBS:
                    return words
                rest = rest[1:]
            while rest and rest[0].startswith("-"):  # the runner's own flags (``npx --yes``)
                rest = rest[1:]
            words = rest
        else:
            return words
    return words


def formatter_writes(words: list[str], is_dir: Callable[[str], bool] = lambda path: path.endswith("/")) -> FormatterWrites | None:
    """What the simple command ``words`` (command word first) rewrites, if it is a known
    formatter or fixer run to write; None otherwise (not one, or a check-only run).
    ``is_dir(operand)`` says whether an operand is an existing folder (by default: only
    a trailing ``/`` says so)."""
    words = _unwrap(list(words))
    if not words:
        return None
    name = posixpath.basename(words[0])
    rest = words[1:]
    if name in _SUBCOMMANDS:
        if not rest or rest[0] not in _SUBCOMMANDS[name]:
            return None
        name, rest = f"{name} {rest[0]}", rest[1:]
    spec = _SPECS.get(name)
    if spec is None:
        return None
    operands, flags = _split(rest, spec.takes_value)
    if flags & spec.check_only or (spec.writes_with and not flags & spec.writes_with):
        return None
    if name in ("go fmt", "cargo fmt", "terraform fmt"):
        # package patterns ("./...") and crate options, not files: the working folder
        operands = [] if name != "terraform fmt" else operands
    found = FormatterWrites(tool=name, suffixes=spec.suffixes)
    if not operands:
        if spec.default_folder:
            found.folders.append(".")
        return found if found.folders else None
    for operand in operands:
        if operand == "-":
            continue  # stdin to stdout
        (found.folders if is_dir(operand) else found.files).append(operand)
    return found if found.files or found.folders else None


def _split(args: list[str], takes_value: frozenset[str]) -> tuple[list[str], set[str]]:
    """(operands, the flags given); ``--`` ends the flags, ``--opt=value`` is one word."""
    operands: list[str] = []
    flags: set[str] = set()
    index = 0
    while index < len(args):
        word = args[index]
        if word == "--":
            operands += args[index + 1 :]
            break
        if word.startswith("-") and word != "-":
            key = word.partition("=")[0] if word.startswith("--") else word
            flags.add(word if word in ("-list=false", "-write=false") else key)
            if key in takes_value and "=" not in word:
                index += 1  # its value
        else:
            operands.append(word)
        index += 1
    return operands, flags
