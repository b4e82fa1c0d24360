"""Which files a formatter run from a shell rewrites (agents.formatters), and how the
shell reading hands them on (agents.shellwrites)."""

from __future__ import annotations

import shlex

import pytest

from agents.formatters import formatter_writes
from agents.shellwrites import write_targets

FOLDERS = {"src", "src/", ".", "docs", "pkg"}


def _read(command: str):
    found = formatter_writes(shlex.split(command), lambda operand: operand in FOLDERS)
    return None if found is None else (found.tool, found.files, found.folders)


@pytest.mark.parametrize(
    "command, expected",
    [
        ("black src/app.py", ("black", ["src/app.py"], [])),
        ("black -l 100 src tests/test_a.py", ("black", ["tests/test_a.py"], ["src"])),  # -l takes 100
        ("black --line-length=100 .", ("black", [], ["."])),
        ("python -m black src", ("black", [], ["src"])),
        ("python3.11 -m black -- -odd.py", ("black", ["-odd.py"], [])),
        ("ruff format", ("ruff format", [], ["."])),  # no operand: the working folder
        ("uv run ruff format src", ("ruff format", [], ["src"])),
        ("uvx ruff check --fix src", ("ruff check", [], ["src"])),
        ("ruff check --fix --select I a.py", ("ruff check", ["a.py"], [])),
        ("poetry run isort src", ("isort", [], ["src"])),
        ("autopep8 -i a.py", ("autopep8", ["a.py"], [])),
        ("npx --yes prettier --write docs", ("prettier", [], ["docs"])),
        ("pnpm exec prettier -w src/a.ts", ("prettier", ["src/a.ts"], [])),
        ("eslint --fix", ("eslint", [], ["."])),
        ("gofmt -w pkg", ("gofmt", [], ["pkg"])),
        ("go fmt ./...", ("go fmt", [], ["."])),  # packages: the working folder
        ("cargo fmt --all", ("cargo fmt", [], ["."])),
        ("rustfmt src/main.rs", ("rustfmt", ["src/main.rs"], [])),
        ("clang-format -i --style=file a.cc b.h", ("clang-format", ["a.cc", "b.h"], [])),
        ("terraform fmt -recursive", ("terraform fmt", [], ["."])),
        ("biome check --write src", ("biome check", [], ["src"])),
    ],
)
def test_a_formatter_run_to_write_names_its_files_and_folders(command, expected):
    assert _read(command) == expected


@pytest.mark.parametrize(
    "command",
    [
        "black --check .",
        "black --diff src",
        "ruff format --check",
        "ruff check src",  # lints; fixes only with --fix
        "ruff check --fix --diff src",
        "isort --check-only src",
        "autopep8 a.py",  # prints; writes with -i
        "prettier --check src",
        "prettier src/a.ts",  # prints; writes with --write
        "eslint src",
        "gofmt -l .",
        "gofmt a.go",  # prints
        "cargo fmt --check",
        "rustfmt --check src/main.rs",
        "black -",  # stdin to stdout
        "ruff",
        "cargo build",
        "python -m pytest",
        "uv run pytest",
        "sed -i s/a/b/ x.py",
        "",
    ],
)
def test_a_run_that_writes_nothing_or_an_unknown_tool_is_not_read(command):
    assert _read(command) is None


def test_the_shell_reading_hands_on_formatted_folders_from_their_cd_base():
    found = write_targets("cd src && ruff format && black ../tests/test_a.py", is_dir=lambda path: path in ("src", "src/."))
    assert found.formatted == [("src", (".py", ".pyi", ".ipynb"))]
    assert found.targets == ["src/../tests/test_a.py"] and not found.unknown  # joined as written; the caller resolves
    # a folder only known at run time: said, not guessed
    unknown = write_targets("black $DIR", is_dir=lambda path: False)
    assert not unknown.formatted and unknown.unknown
    # a glob of files is expanded by the caller, as other writers' globs are
    assert write_targets("black src/*.py").globs == ["src/*.py"]
