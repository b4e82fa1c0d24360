"""Tests of probes.model, probes.output and each kind in probes.builtin, called directly.

Real files, real subprocesses, a real HTTP server on loopback (http.server in a
thread), real processes for the ``processes`` kind.  The pool (worker processes,
timeouts, suites) is tested in test_probe_pool.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest
import trio
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from probes import builtin
from probes.builtin import parse_json_path, prepare
from probes.kinds import command as command_kind
from probes.kinds import http as http_kind
from probes.model import (
    BUILD_PRODUCED_NOTHING,
    COMMAND_FAILED,
    ENDPOINT_FAILING,
    FAIL,
    HANDOFF_INCOMPLETE,
    PASS,
    PROCESSES_MISSING,
    PROCESSES_UNEXPECTED,
    SIDE_EFFECT_MISSING,
    WRITE_LOST,
    ProbeError,
    ProbeResult,
    ProbeSpec,
    decode_result,
    decode_spec,
    encode_result,
)
from probes.output import (
    SEPARATOR,
    errors_first,
    looks_like_failure,
    reorder,
    truncation_marker,
)

from ...http_site import Routes, serve, stop


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_direct(spec: ProbeSpec) -> ProbeResult:
    """A synchronous kind run in this process, the way a worker runs it."""
    prepared, params = prepare(spec)
    return builtin.run_python_probe(builtin.PYTHON_PROBES[prepared.kind], prepared, params)


async def run_command(spec: ProbeSpec) -> ProbeResult:
    prepared, params = prepare(spec)
    with trio.fail_after(spec.timeout + 10):
        return await builtin.probe_command(prepared, params)


# -- output: errors first -----------------------------------------------------------

PYTEST_LOG = """\
============================= test session starts ==============================
collected 3 items

tests/test_a.py ..F                                                      [100%]

=================================== FAILURES ===================================
___________________________________ test_sum ___________________________________

    def test_sum():
>       assert add(1, 2) == 4
E       assert 3 == 4
E        +  where 3 = add(1, 2)

tests/test_a.py:9: AssertionError
=========================== short test summary info ============================
FAILED tests/test_a.py::test_sum - assert 3 == 4
========================= 1 failed, 2 passed in 0.02s =========================="""


def test_errors_first_puts_failure_lines_with_context_before_the_rest():
    out = errors_first(PYTEST_LOG)
    head, rest = out.split("\n" + SEPARATOR + "\n")
    head_lines = head.split("\n")
    assert head_lines[0].startswith("=====") and "FAILURES" in head_lines[0]
    assert "E       assert 3 == 4" in head_lines
    assert "FAILED tests/test_a.py::test_sum - assert 3 == 4" in head_lines
    assert "tests/test_a.py:9: AssertionError" in head_lines
    # Context: the two lines after ">       assert add(1, 2) == 4" came along.
    assert head_lines.index("E        +  where 3 = add(1, 2)") > head_lines.index("E       assert 3 == 4")
    assert rest.startswith("=" * 29 + " test session starts")
    assert "collected 3 items" in rest


def test_traceback_keeps_two_lines_of_context_in_order():
    text = "ok 1\nok 2\nTraceback (most recent call last):\n  File \"x.py\", line 1\n    boom()\nok 3\nValueError: bad"
    assert errors_first(text).split("\n") == [
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "    boom()",
        "ValueError: bad",
        SEPARATOR,
        "ok 1",
        "ok 2",
        "ok 3",
    ]


def test_text_without_failures_is_returned_unchanged():
    text = "compiling foo\ncompiling bar\ndone in 3s\n"
    assert errors_first(text) == text


@pytest.mark.parametrize(
    "line",
    [
        "error: could not compile `foo`",
        "error[E0308]: mismatched types",
        "Error: ENOENT",
        "FAILED tests/test_x.py::test_y",
        "3 failed, 2 passed",
        "Traceback (most recent call last):",
        "KeyError: 'x'",
        "E       assert 1 == 2",
        "thread 'main' panicked at src/main.rs:2:5",
        "fatal: not a git repository",
        "✗ build",
        "make: *** [all] Error 2",
        "process exited with code 1",
        "Command '['ls']' returned non-zero exit status 2.",
        "Segmentation fault (core dumped)",
    ],
)
def test_failure_lines_are_recognised(line):
    assert looks_like_failure(line)


@pytest.mark.parametrize(
    "line",
    ["collected 3 items", "compiling foo v0.1.0", "exit status 0", "Everything up-to-date", "Errata: none", ""],
)
def test_ordinary_lines_are_not(line):
    assert not looks_like_failure(line)


def test_truncation_keeps_the_head_of_the_error_part_and_counts_the_rest():
    noise = [f"step {i} ok" for i in range(2000)]
    text = "\n".join(noise[:1000] + ["error: the one that matters"] + noise[1000:])
    out = errors_first(text, limit=500)
    assert out.startswith("error: the one that matters\n")
    assert "… [truncated " in out and out.endswith(" chars] …")
    dropped = int(out.rsplit("[truncated ", 1)[1].split()[0])
    kept = out[: -len(truncation_marker(dropped))]
    assert len(kept) <= 500
    assert len(kept) + dropped == len(reorder(text))


lines_strategy = st.lists(
    st.one_of(
        st.sampled_from(["ok", "error: x", "E   assert 0", "Traceback (most recent call last):", "", "  frame", "FAILED t"]),
        st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=30),
    ),
    max_size=40,
)


@given(lines_strategy)
def test_untruncated_output_is_a_permutation_with_failures_before_the_separator(lines):
    text = "\n".join(lines)
    assume(SEPARATOR not in lines)
    out_lines = errors_first(text, limit=10**9).split("\n")
    if SEPARATOR in out_lines:
        cut = out_lines.index(SEPARATOR)
        head, rest = out_lines[:cut], out_lines[cut + 1 :]
        assert sorted(head + rest) == sorted(text.split("\n"))
        assert not any(looks_like_failure(line) for line in rest)
        assert any(looks_like_failure(line) for line in head)
    else:
        assert sorted(out_lines) == sorted(text.split("\n"))


@given(lines_strategy)
def test_errors_first_is_idempotent_without_truncation(lines):
    assume(SEPARATOR not in lines)
    once = errors_first("\n".join(lines), limit=10**9)
    assert errors_first(once, limit=10**9) == once


@settings(max_examples=200)
@given(st.text(max_size=3000), st.integers(min_value=0, max_value=2000))
def test_output_never_exceeds_limit_plus_marker(text, limit):
    out = errors_first(text, limit=limit)
    longest_marker = truncation_marker(len(text) + len(SEPARATOR) + 1)
    assert len(out) <= limit + len(longest_marker)
    if len(reorder(text)) <= limit:
        assert out == reorder(text)
    else:
        assert "… [truncated " in out


@given(st.text(max_size=500))
def test_errors_first_is_deterministic(text):
    assert errors_first(text, 100) == errors_first(text, 100)


# -- model --------------------------------------------------------------------------


def test_result_round_trips_through_json():
    result = ProbeResult(
        name="n", kind="write", target="/x", verdict=FAIL, finding=WRITE_LOST, reason="r",
        details={"expected": "a", "actual": None},
    )
    assert decode_result(encode_result(result)) == result
    assert not result.passed
    with pytest.raises(AttributeError):
        result.verdict = PASS  # type: ignore[misc]


def test_spec_decodes_from_json_and_rejects_unknown_fields():
    spec = decode_spec(b'{"name": "w", "kind": "write", "params": {"path": "a"}, "timeout": 5}')
    assert spec == ProbeSpec(name="w", kind="write", params={"path": "a"}, timeout=5.0)
    with pytest.raises(ProbeError, match="malformed"):
        decode_spec(b'{"name": "w", "kind": "write", "colour": "red"}')


BAD_SPECS = [
    (ProbeSpec(name="x", kind="teleport"), "unknown kind"),
    (ProbeSpec(name="", kind="write", params={"path": "a", "sha256": "0" * 64}), "non-empty name"),
    (ProbeSpec(name="x", kind="write", params={"path": "a"}), "sha256"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "xyz"}), "64 hex"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64, "sha265": 1}), "unknown field"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64}, timeout=0), "timeout"),
    # a timeout of 5e-324 ran and "timed out"; one of 1e308 let a hung check hold its job for ever
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64}, timeout=5e-324), "between 0.01 s and 86400 s"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64}, timeout=0.009), "between 0.01 s and 86400 s"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64}, timeout=1e308), "between 0.01 s and 86400 s"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64}, timeout=2.0**63), "between 0.01 s and 86400 s"),
    (ProbeSpec(name="x", kind="write", params={"path": "a", "sha256": "0" * 64}, cwd="rel/dir"), "absolute"),
    (ProbeSpec(name="x", kind="command", params={}), "exactly one of argv"),
    (ProbeSpec(name="x", kind="command", params={"argv": ["a"], "shell": "b"}), "exactly one of argv"),
    (ProbeSpec(name="x", kind="command", params={"argv": []}), "argv is empty"),
    (ProbeSpec(name="x", kind="command", params={"argv": "ls -l"}), "bad params"),
    # no process exits so, and nothing satisfies nan: the check failed whatever happened
    (ProbeSpec(name="x", kind="command", params={"argv": ["true"], "expect_exit": 256}), "expect_exit must be an exit status"),
    (ProbeSpec(name="x", kind="command", params={"argv": ["true"], "expect_exit": -(2**63)}), "expect_exit must be an exit status"),
    (ProbeSpec(name="x", kind="http", params={"url": "http://localhost/", "json_path": "$.a", "at_least": float("nan")}), "finite"),
    (ProbeSpec(name="x", kind="http", params={"url": "http://localhost/", "json_path": "$.a", "at_least": float("-inf")}), "finite"),
    # a spawn refuses these: the job ended in an "internal error"
    (ProbeSpec(name="x", kind="command", params={"argv": ["true"], "env": {"A=B": "1"}}), "not a variable name"),
    (ProbeSpec(name="x", kind="command", params={"shell": "true", "env": {"": "1"}}), "not a variable name"),
    (ProbeSpec(name="x", kind="http", params={"url": "http://example.com/"}), "loopback"),
    (ProbeSpec(name="x", kind="http", params={"url": "http://10.0.0.1/"}), "loopback"),
    (ProbeSpec(name="x", kind="http", params={"url": "ftp://localhost/"}), "http"),
    (ProbeSpec(name="x", kind="http", params={"url": "http://localhost/", "json_path": "a.b"}), "start with"),
    (ProbeSpec(name="x", kind="http", params={"url": "http://localhost/", "json_path": "$.a[x]"}), "cannot parse"),
    (ProbeSpec(name="x", kind="processes", params={"match": "("}), "regex"),
    (ProbeSpec(name="x", kind="build", params={"dir": "d", "previous_hash": "abc"}), "previous_hash"),
    (ProbeSpec(name="x", kind="handoff", params={"path": "h.md", "threshold": 101}), "threshold"),
    (ProbeSpec(name="x", kind="write", params="not a dict"), "malformed"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("spec, message", BAD_SPECS, ids=[m for _, m in BAD_SPECS])
def test_malformed_specs_raise_probe_error(spec, message):
    with pytest.raises(ProbeError, match=message):
        prepare(spec)


def test_prepare_pins_cwd_to_the_current_directory():
    spec, _ = prepare(ProbeSpec(name="x", kind="command", params={"argv": ["true"]}))
    assert spec.cwd == os.getcwd()


@pytest.mark.parametrize(
    "url", ["http://localhost:8080/x", "http://127.0.0.1/", "http://[::1]:80/", "https://LOCALHOST./", "http://[0:0::1]/"]
)
def test_loopback_urls_are_accepted(url):
    builtin.check_loopback_url(url)


@pytest.mark.parametrize("url", ["http://127.1.2.3:9/", "https://app.localhost/", "http://127.0.0.2/"])
def test_other_loopback_names_and_addresses_need_listing(url):
    # they stand for "another machine" (probes.reach): implicit are localhost, 127.0.0.1, ::1
    with pytest.raises(ProbeError, match="allow"):
        builtin.check_loopback_url(url)
    builtin.check_reachable(url, [url.rstrip("/")])


def test_json_path_subset():
    assert parse_json_path("$") == ()
    assert parse_json_path("$.a.b[0].c") == ("a", "b", 0, "c")
    assert parse_json_path("$['a b'][-1][\"c\"]") == ("a b", -1, "c")
    doc = {"a": {"b": [{"c": 7}]}}
    assert builtin.follow_json_path(doc, parse_json_path("$.a.b[0].c")) == 7
    assert builtin.follow_json_path(doc, parse_json_path("$.a.b[1]")) is http_kind._MISSING
    assert builtin.follow_json_path(doc, parse_json_path("$.a.x")) is http_kind._MISSING


# -- write --------------------------------------------------------------------------


def write_spec(tmp_path: Path, path: str, digest: str) -> ProbeSpec:
    return ProbeSpec(name="wrote", kind="write", params={"path": path, "sha256": digest}, cwd=str(tmp_path))


def test_write_passes_when_the_file_has_the_claimed_hash(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_bytes(b"print('hi')\n")
    result = run_direct(write_spec(tmp_path, "src/a.py", sha256(b"print('hi')\n").upper()))
    assert result.verdict == PASS and result.finding is None
    assert result.target == str(tmp_path / "src" / "a.py")
    assert result.details["actual"] == result.details["expected"]
    assert result.duration > 0


def test_write_fails_when_the_content_differs(tmp_path):
    (tmp_path / "a.py").write_bytes(b"overwritten by someone else\n")
    claimed = sha256(b"what the agent wrote\n")
    result = run_direct(write_spec(tmp_path, "a.py", claimed))
    assert result.verdict == FAIL and result.finding == WRITE_LOST
    assert result.details == {
        "path": str(tmp_path / "a.py"),
        "expected": claimed,
        "actual": sha256(b"overwritten by someone else\n"),
    }
    assert "lost" in result.reason


def test_write_fails_when_the_file_is_missing(tmp_path):
    result = run_direct(write_spec(tmp_path, "gone.py", "0" * 64))
    assert result.finding == WRITE_LOST and result.details["actual"] is None
    assert "does not exist" in result.reason


def _worktree(tmp_path: Path) -> Path:
    """A worktree's shape (a ``.git`` entry at its top) with a file outside it."""
    top = tmp_path / "repo"
    (top / ".git").mkdir(parents=True)
    (top / "src").mkdir()
    (tmp_path / "outside.txt").write_bytes(b"secret\n")
    return top


@pytest.mark.parametrize("path", ["/etc/passwd", "../../outside.txt", "../src/../../outside.txt", "../link-out", "link-dir/outside.txt"])
def test_write_refuses_a_file_outside_the_worktree_symlinks_followed(tmp_path, path):
    # it read any file the coordinator could, and its verdict said whether it had the hash
    top = _worktree(tmp_path)  # the check runs in top/src
    (top / "link-out").symlink_to(tmp_path / "outside.txt")
    (top / "src" / "link-dir").symlink_to(tmp_path)
    with pytest.raises(ProbeError, match="is outside the worktree .*a write check reads only the repository's files"):
        prepare(write_spec(top / "src", path, sha256(b"secret\n")))


@pytest.mark.parametrize("name", ["a[1].py", "with space.txt", "été ünï.txt", "../src/x.py"])
def test_write_reads_files_inside_the_worktree_whatever_their_names(tmp_path, name):
    top = _worktree(tmp_path)
    (top / "src" / Path(name).name).write_bytes(b"data\n")
    (top / "src" / "in-link").symlink_to(top / "src" / Path(name).name)  # a symlink that stays inside is followed
    for path in (name, "in-link"):
        result = run_direct(write_spec(top / "src", path, sha256(b"data\n")))
        assert result.verdict == PASS, result


# -- build --------------------------------------------------------------------------


def make_artifact(folder: Path, name: str, data: bytes, mtime: int) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime, mtime))
    return path


def build_spec(tmp_path: Path, previous: str | None, **extra: Any) -> ProbeSpec:
    return ProbeSpec(
        name="built", kind="build", params={"dir": "dist", "previous_hash": previous, **extra}, cwd=str(tmp_path)
    )


def test_build_hashes_the_newest_artifact_recursively(tmp_path):
    dist = tmp_path / "dist"
    make_artifact(dist, "old.whl", b"old", 1_000_000_000_000_000_000)
    newest = make_artifact(dist, "sub/new.whl", b"new", 1_000_000_002_000_000_000)
    result = run_direct(build_spec(tmp_path, sha256(b"old")))
    assert result.verdict == PASS
    assert result.details == {"artifact": str(newest), "hash": sha256(b"new"), "previous_hash": sha256(b"old")}


def test_build_breaks_mtime_ties_by_name_and_honours_the_pattern(tmp_path):
    dist = tmp_path / "dist"
    make_artifact(dist, "a.whl", b"a", 1_000_000_000_000_000_000)
    make_artifact(dist, "b.whl", b"b", 1_000_000_000_000_000_000)
    make_artifact(dist, "z.log", b"log", 1_000_000_009_000_000_000)
    result = run_direct(build_spec(tmp_path, None, pattern="*.whl"))
    assert result.verdict == PASS and result.details["artifact"] == str(dist / "b.whl")


def test_build_fails_when_the_newest_artifact_is_the_last_one(tmp_path):
    make_artifact(tmp_path / "dist", "app.tar.gz", b"same bytes", 1_000_000_000_000_000_000)
    result = run_direct(build_spec(tmp_path, sha256(b"same bytes")))
    assert result.verdict == FAIL and result.finding == BUILD_PRODUCED_NOTHING
    assert result.details["hash"] == result.details["previous_hash"]
    assert "nothing new" in result.reason


@pytest.mark.parametrize("make_dir", [True, False])
def test_build_fails_with_no_artifact_or_no_folder(tmp_path, make_dir):
    if make_dir:
        (tmp_path / "dist" / "empty-subdir").mkdir(parents=True)
    result = run_direct(build_spec(tmp_path, None))
    assert result.finding == BUILD_PRODUCED_NOTHING and result.details["artifact"] is None


# -- command ------------------------------------------------------------------------


def command_spec(tmp_path: Path, timeout: float = 30.0, **params: Any) -> ProbeSpec:
    return ProbeSpec(name="cmd", kind="command", params=params, cwd=str(tmp_path), timeout=timeout)


async def test_command_passes_on_the_expected_exit_status(tmp_path):
    result = await run_command(command_spec(tmp_path, argv=[sys.executable, "-c", "print('all fine')"]))
    assert result.verdict == PASS and result.exit_code == 0
    assert result.output == "all fine\n"
    assert result.target.endswith("-c 'print('\"'\"'all fine'\"'\"')'")


async def test_command_failure_reports_exit_code_and_errors_first(tmp_path):
    script = "; ".join(
        [
            "import sys",
            "print('\\n'.join(f'compiling module {i}' for i in range(50)))",
            "print('error: undefined name foo', file=sys.stderr)",
            "sys.exit(3)",
        ]
    )
    result = await run_command(command_spec(tmp_path, argv=[sys.executable, "-c", script]))
    assert result.verdict == FAIL and result.finding == COMMAND_FAILED and result.exit_code == 3
    lines = result.output.split("\n")
    assert lines[0] == "lockstep: command failed: exited with status 3, expected 0"
    assert "error: undefined name foo" in lines[:3]
    # stderr comes before stdout, so the error's 2 context lines are stdout's first two.
    assert lines.index(SEPARATOR) < lines.index("compiling module 2") < lines.index("compiling module 49")
    assert "status 3" in result.reason


async def test_command_expect_exit_env_and_shell(tmp_path):
    result = await run_command(
        command_spec(tmp_path, shell='test "$PROBE_COLOUR" = teal && test -n "$PATH" && exit 4', expect_exit=4, env={"PROBE_COLOUR": "teal"})
    )
    assert result.verdict == PASS and result.exit_code == 4


async def test_command_that_cannot_start_fails_without_an_exit_code(tmp_path):
    result = await run_command(command_spec(tmp_path, argv=["./no-such-program"]))
    assert result.finding == COMMAND_FAILED and result.exit_code is None
    assert "could not start" in result.reason


async def test_command_in_a_missing_worktree_says_so(tmp_path):
    result = await run_command(command_spec(tmp_path / "deleted-worktree", argv=["true"]))
    assert result.finding == COMMAND_FAILED and "does not exist" in result.reason


async def test_command_killed_by_a_signal_reports_it(tmp_path):
    result = await run_command(command_spec(tmp_path, shell="kill -SEGV $$"))
    assert result.finding == COMMAND_FAILED and result.exit_code == -11
    assert "SIGSEGV" in result.reason


async def test_command_creates_a_new_file(tmp_path):
    result = await run_command(command_spec(tmp_path, shell="echo built > out.bin", creates="out.bin"))
    assert result.verdict == PASS and result.details["creates"] == str(tmp_path / "out.bin")


async def test_command_that_does_not_create_its_file_misses_the_side_effect(tmp_path):
    result = await run_command(command_spec(tmp_path, shell="echo pretending", creates="out.bin"))
    assert result.verdict == FAIL and result.finding == SIDE_EFFECT_MISSING and result.exit_code == 0
    assert "did not create" in result.reason


async def test_command_must_change_a_file_that_existed_before(tmp_path):
    (tmp_path / "out.bin").write_bytes(b"v1")
    unchanged = await run_command(command_spec(tmp_path, shell="cat out.bin", creates="out.bin"))
    assert unchanged.finding == SIDE_EFFECT_MISSING and "unchanged" in unchanged.reason
    changed = await run_command(command_spec(tmp_path, shell="printf v2 > out.bin", creates="out.bin"))
    assert changed.verdict == PASS


async def test_command_output_is_bounded_and_keeps_the_late_error(tmp_path):
    script = "print('x' * 3_000_000); print('error: at the very end')"
    result = await run_command(command_spec(tmp_path, argv=[sys.executable, "-c", script]))
    assert result.verdict == PASS
    assert result.output.startswith("error: at the very end\n")
    assert "… [truncated " in result.output and len(result.output) < 8100


def test_capture_keeps_both_ends_and_counts_the_middle():
    capture = command_kind._Capture()
    for _ in range(10):
        capture.feed(b"a" * 40_000)
    capture.feed(b"\nthe end")
    text = capture.text()
    dropped = 400_008 - command_kind.CAPTURE_HEAD - command_kind.CAPTURE_TAIL
    assert f"[{dropped} bytes not captured]" in text
    assert text.startswith("a" * command_kind.CAPTURE_HEAD) and text.endswith("\nthe end")


# -- http ---------------------------------------------------------------------------


ROUTES: Routes = {
    "/ok": (200, {}, b"service is healthy"),
    "/json": (
        200,
        {"Content-Type": "application/json"},
        json.dumps({"status": "ok", "workers": [{"busy": 5}], "ready": True, "one": 1}).encode(),
    ),
    "/broken": (503, {}, b"upstream error: database unreachable"),
    "/deep": (200, {"Content-Type": "application/json"}, b"[" * 100_000 + b"]" * 100_000),  # RecursionError in a decoder
    "/moved": (302, {"Location": "http://example.com/"}, b""),
}


@pytest.fixture
def server_url() -> Iterator[str]:
    server = serve("127.0.0.1", ROUTES)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop(server)


def http_spec(url: str, **params: Any) -> ProbeSpec:
    return ProbeSpec(name="endpoint", kind="http", params={"url": url, **params}, timeout=10)


def test_http_passes_on_status_and_content(server_url):
    result = run_direct(http_spec(f"{server_url}/ok", contains="healthy"))
    assert result.verdict == PASS and result.details["status"] == 200 and result.exit_code is None


def test_http_fails_on_a_wrong_status_and_shows_the_body(server_url):
    result = run_direct(http_spec(f"{server_url}/broken"))
    assert result.verdict == FAIL and result.finding == ENDPOINT_FAILING
    assert result.details["status"] == 503
    assert "status 503, expected 200" in result.reason
    assert "database unreachable" in result.output


def test_http_status_none_accepts_any_answer(server_url):
    assert run_direct(http_spec(f"{server_url}/broken", status=None)).verdict == PASS


def test_http_json_path_equals_and_at_least(server_url):
    url = f"{server_url}/json"
    ok = run_direct(http_spec(url, json_path="$.workers[0].busy", equals=5, at_least=3))
    assert ok.verdict == PASS and ok.details["value"] == 5
    low = run_direct(http_spec(url, json_path="$.workers[0].busy", at_least=6))
    assert low.finding == ENDPOINT_FAILING and "expected at least 6" in low.reason
    assert run_direct(http_spec(url, json_path="$.status", equals="ok")).verdict == PASS
    assert run_direct(http_spec(url, json_path="$.status", equals="degraded")).verdict == FAIL
    missing = run_direct(http_spec(url, json_path="$.workers[3]"))
    assert missing.verdict == FAIL and "not in the JSON body" in missing.reason


def test_http_json_true_is_not_one(server_url):
    url = f"{server_url}/json"
    assert run_direct(http_spec(url, json_path="$.ready", equals=True)).verdict == PASS
    assert run_direct(http_spec(url, json_path="$.ready", equals=1)).verdict == FAIL
    assert run_direct(http_spec(url, json_path="$.one", equals=True)).verdict == FAIL


def test_http_non_json_body_fails_a_json_check(server_url):
    result = run_direct(http_spec(f"{server_url}/ok", json_path="$.status", equals="ok"))
    assert result.finding == ENDPOINT_FAILING and "not JSON" in result.reason


def test_a_body_nested_without_end_fails_a_json_check_as_not_json(server_url, tmp_path):
    result = run_direct(http_spec(f"{server_url}/deep", json_path="$.status", equals="ok"))
    assert result.verdict == FAIL and result.finding == ENDPOINT_FAILING and "not JSON" in result.reason
    (tmp_path / "a.json").write_text('{"version": 1}')
    (tmp_path / "b.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)  # a file in the agent's worktree
    spec = ProbeSpec(name="same", kind="consistency", params={"sources": ["a.json", "b.json"], "json_path": "$.version"}, cwd=str(tmp_path))
    result = run_direct(spec)
    assert result.verdict == FAIL and "not JSON" in result.reason


def test_http_does_not_follow_redirects(server_url):
    assert run_direct(http_spec(f"{server_url}/moved", status=302)).verdict == PASS
    assert run_direct(http_spec(f"{server_url}/moved")).details["status"] == 302


def test_http_unreachable_endpoint_fails():
    with socket.socket() as placeholder:  # a port nobody listens on
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    result = run_direct(http_spec(f"http://127.0.0.1:{port}/health"))
    assert result.finding == ENDPOINT_FAILING and result.details["status"] is None
    assert "could not reach" in result.reason


# -- processes ----------------------------------------------------------------------


@pytest.fixture
def marked_processes() -> Iterator[str]:
    """Two live processes whose command lines carry a unique marker plus -alpha/-beta.

    They block reading stdin, so they live exactly as long as the fixture."""
    marker = f"lockstep-probe-{uuid.uuid4().hex}"
    children = [
        subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", f"{marker}-{suffix}"], stdin=subprocess.PIPE)
        for suffix in ("alpha", "beta")
    ]
    try:
        yield marker
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=10)


def processes_spec(**params: Any) -> ProbeSpec:
    return ProbeSpec(name="procs", kind="processes", params=params)


def test_processes_pass_when_enough_are_running(marked_processes):
    result = run_direct(processes_spec(match=marked_processes, count=2, names=["alpha$", "beta$"]))
    assert result.verdict == PASS and result.details["found"] == 2 and result.details["missing"] == []


def test_processes_fail_naming_what_is_missing(marked_processes):
    result = run_direct(processes_spec(match=marked_processes, count=3, names=["alpha", "beta", "gamma"]))
    assert result.verdict == FAIL and result.finding == PROCESSES_MISSING
    assert result.details["found"] == 2 and result.details["expected"] == 3
    assert result.details["missing"] == ["gamma"]
    assert "gamma" in result.reason


def test_processes_more_than_count_passes_unless_exact(marked_processes):
    assert run_direct(processes_spec(match=marked_processes, count=1)).verdict == PASS
    exact = run_direct(processes_spec(match=marked_processes, count=1, exact=True))
    assert exact.finding == PROCESSES_UNEXPECTED and exact.details["found"] == 2


def test_processes_none_running():
    result = run_direct(processes_spec(match=f"no-such-process-{uuid.uuid4().hex}"))
    assert result.finding == PROCESSES_MISSING and result.details["found"] == 0


# -- handoff ------------------------------------------------------------------------


def test_handoff_scores_through_probes_handoff(tmp_path):
    (tmp_path / "HANDOFF.md").write_text("# Notes\n\nDid some things.\n")
    spec = ProbeSpec(name="handoff", kind="handoff", params={"path": "HANDOFF.md"}, cwd=str(tmp_path))
    result = run_direct(spec)
    assert result.verdict == FAIL and result.finding == HANDOFF_INCOMPLETE
    assert result.details["passed"] is False and result.details["score"] < 85
    assert result.details["missing"] and result.details["breakdown"]
    lenient = msgspec.structs.replace(spec, params={"path": "HANDOFF.md", "threshold": 0})
    assert run_direct(lenient).verdict == PASS


def test_handoff_note_missing(tmp_path):
    result = run_direct(ProbeSpec(name="handoff", kind="handoff", params={"path": "nope.md"}, cwd=str(tmp_path)))
    assert result.finding == HANDOFF_INCOMPLETE and "no readable handoff note" in result.reason


def test_handoff_asks_git_what_the_ledger_does_not_know(tmp_path):
    """With ``known`` (the coordinator's evidence) the probe completes it from a real git
    repository: what changed since the base, which commits exist, where tests live."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "README.md").write_text("x\n")
    git("add", ".")
    git("commit", "-q", "-m", "init")
    git("checkout", "-q", "-b", "work")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_alpha():\n    pass\n")
    git("add", ".")
    git("commit", "-q", "-m", "a test")
    head = git("rev-parse", "HEAD")
    # A note names commits by ids with a letter and a digit (a number is no commit id):
    # about 1 id in 300 starts with 12 digits, so give this one a letter.
    while head[:12].isdigit() or not any(c.isdigit() for c in head[:12]):
        git("commit", "-q", "--amend", "-m", f"a test {head[:4]}")
        head = git("rev-parse", "HEAD")
    (tmp_path / "notes.txt").write_text("untracked\n")
    note = (
        f"# Handoff\n\n## Files\n- `tests/test_a.py`: new.\n- `notes.txt`: new.\n- `README.md`: edited.\n\n"
        f"## Work completed\ntest_alpha passes in the verify run; commits {head[:12]} and fedcba9876 exist.\n"
    )
    (tmp_path / "HANDOFF.md").write_text(note)
    known = {"written": [], "claimed": [], "verify": {"job": "3", "passed": True, "checks": [
        {"name": "tests", "verdict": "pass", "target": f"{sys.executable} -m pytest -q tests"}]}}
    params = {"path": "HANDOFF.md", "threshold": 0, "agent": "bob", "base": "refs/heads/main", "known": known}
    result = run_direct(ProbeSpec(name="handoff", kind="handoff", params=params, cwd=str(tmp_path)))
    facts = {(f["kind"], f["claim"]): f["holds"] for f in result.details["facts"]}
    assert facts[("changed", "tests/test_a.py")] and facts[("changed", "notes.txt")]
    assert facts[("changed", "README.md")] is False  # on main already, not changed on bob's branch
    assert facts[("commit", head[:12])] and facts[("commit", "fedcba9876")] is False
    assert facts[("test", "test_alpha")]  # tests/test_a.py defines it; the check runs tests/
    assert result.finding == HANDOFF_INCOMPLETE and "false fact" in result.reason
    assert result.details["agent"] == "bob" and result.details["facts_checked"]
