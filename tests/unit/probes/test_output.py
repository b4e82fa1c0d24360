"""Truncated reports keep the essentials: the runner's totals and short summary, whole
failure blocks with their headers, and how many failures were not shown.

The runs are made here from scratch: a pytest suite of 300 failing tests and a unittest
suite are really run; a TAP-emitting script (no Node needed) is really run; jest,
vitest, node --test, cargo test and go test output is generated in their formats.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probes.output import (
    DEFAULT_LIMIT,
    SEPARATOR,
    errors_first,
    looks_like_failure,
    reorder,
    truncation_marker,
)

RUN_TIMEOUT = 300  # a whole pytest run of 300 tests, on a loaded machine


def run(argv: list[str], cwd) -> str:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return done.stderr + done.stdout


def assert_within_bound(text: str, out: str, limit: int = DEFAULT_LIMIT) -> None:
    assert len(out) <= limit + len(truncation_marker(len(text) + len(SEPARATOR) + 1))
    assert "… [truncated " in out


def hidden_count(out: str) -> int:
    found = re.search(r"… (\d+) more failures? not shown …", out)
    assert found, out[-2000:]
    return int(found.group(1))


# -- pytest, really run ---------------------------------------------------------------


@pytest.fixture(scope="module")
def pytest_300_failures(tmp_path_factory) -> str:
    # 300 failing and 40 passing tests in 20 files (test_many.py first, then
    # test_more_01.py ...): pytest parses a failing test's whole file again for each
    # failure it reports, so one file of 340 tests made the run ~18 s of CPU, 20 files ~3 s.
    root = tmp_path_factory.mktemp("suite300")
    for k in range(20):
        tests = ["def helper(n):\n    return n * 2\n"]
        for n in range(15 * k, 15 * (k + 1)):
            tests.append(f"def test_fails_{n}():\n    value = helper({n})\n    assert value == {n} * 2 + 1, 'off by design'\n")
        for n in range(2 * k, 2 * (k + 1)):
            tests.append(f"def test_passes_{n}():\n    assert helper({n}) == {2 * n}\n")
        (root / ("test_many.py" if k == 0 else f"test_more_{k:02}.py")).write_text("\n".join(tests))
    return run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"], root)


def test_a_300_failure_pytest_run_keeps_its_totals_summary_and_first_failures(pytest_300_failures):
    text = pytest_300_failures
    assert "300 failed, 40 passed" in text and len(text) > 10 * DEFAULT_LIMIT  # the run is real
    out = errors_first(text)
    assert_within_bound(text, out)
    lines = out.split("\n")
    totals = [line for line in lines if re.search(r"300 failed, 40 passed in [\d.]+s", line)]
    assert totals, "the totals line was cut"
    assert any("short test summary info" in line for line in lines)
    assert "FAILED test_many.py::test_fails_0 - AssertionError: off by design" in lines
    assert "of the summary not shown" in out  # 300 summary lines cannot all fit
    # The first failure is whole: its header, its code frame, its E lines, its location.
    header = next(i for i, line in enumerate(lines) if re.fullmatch(r"_+ test_fails_0 _+", line))
    frame = lines[header : header + 12]
    assert any(line.startswith(">") and "assert value == 0 * 2 + 1" in line for line in frame)
    assert any(line.startswith("E ") for line in frame)
    assert any(line.startswith("test_many.py:") and line.endswith("AssertionError") for line in frame)
    shown = sum(1 for line in lines if re.fullmatch(r"_+ test_fails_\d+ _+", line))
    assert shown >= 1 and hidden_count(out) == 300 - shown


def test_pytest_9_subtest_failures_are_recognised(tmp_path):
    (tmp_path / "test_sub.py").write_text(textwrap.dedent("""\
        class Mismatch(Exception):
            pass

        def test_cases(subtests):
            for i in range(3):
                with subtests.test(msg="case", i=i):
                    if i == 1:
                        raise Mismatch(f"case {i} differs")
        """))
    text = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_sub.py"], tmp_path)
    subfailed = [line for line in text.split("\n") if line.startswith("SUBFAILED")]
    assert len(subfailed) == 1 and subfailed[0].startswith("SUBFAILED[case] (i=1) test_sub.py::test_cases - test_sub.Mismatch"), text
    assert all(looks_like_failure(line) for line in subfailed)
    # Among a long noisy log, the SUBFAILED line is among what is kept.
    noisy = "\n".join(f"progress line {n}" for n in range(3000)) + "\n" + text
    assert subfailed[0] in errors_first(noisy)


def test_a_unittest_run_keeps_ran_and_failed_lines(tmp_path):
    cases = "\n".join(
        f"    def test_{n}(self):\n        self.assertEqual({n}, {n} + 1)\n" for n in range(150)
    )
    (tmp_path / "test_unit.py").write_text(f"import unittest\n\nclass Case(unittest.TestCase):\n{cases}")
    text = run([sys.executable, "-m", "unittest", "test_unit"], tmp_path)
    out = errors_first(text)
    assert_within_bound(text, out)
    lines = out.split("\n")
    assert any(re.fullmatch(r"Ran 150 tests in [\d.]+s", line) for line in lines)
    assert "FAILED (failures=150)" in lines
    first = lines.index("FAIL: test_0 (test_unit.Case.test_0)")
    assert "AssertionError: 0 != 1" in lines[first : first + 8]
    shown = sum(1 for line in lines if line.startswith("FAIL: test_"))
    assert hidden_count(out) == 150 - shown


# -- TAP, from a script that is not Node ------------------------------------------------


TAP_SCRIPT = r"""
import sys
print("TAP version 13")
for n in range(1, 201):
    print(f"# Subtest: case {n}")
    if n % 2:
        print(f"not ok {n} - case {n}")
        print("  ---")
        print("  duration_ms: 0.5")
        print(f"  error: 'values differ in case {n}'")
        print(f"  expected: {n + 1}")
        print(f"  actual: {n}")
        print("  operator: 'strictEqual'")
        print("  ...")
    else:
        print(f"ok {n} - case {n}")
print("1..200")
for key, value in (("tests", 200), ("pass", 100), ("fail", 100), ("cancelled", 0), ("skipped", 0)):
    print(f"# {key} {value}")
sys.exit(1)
"""


def test_tap_failures_and_totals_are_kept(tmp_path):
    (tmp_path / "emit_tap.py").write_text(TAP_SCRIPT)
    text = run([sys.executable, "emit_tap.py"], tmp_path)
    assert "not ok 1 - case 1" in text and len(text) > DEFAULT_LIMIT
    assert looks_like_failure("not ok 1 - case 1")
    assert looks_like_failure("  expected: 2") and looks_like_failure("  actual: 1")
    out = errors_first(text, limit=3000)
    assert_within_bound(text, out, 3000)
    lines = out.split("\n")
    for totals in ("# tests 200", "# pass 100", "# fail 100"):
        assert totals in lines
    first = lines.index("not ok 1 - case 1")
    assert lines[first + 4 : first + 6] == ["  expected: 2", "  actual: 1"]
    shown = sum(1 for line in lines if line.startswith("not ok "))
    assert hidden_count(out) == 100 - shown


# -- other runners' formats, generated ------------------------------------------------


def jest_output(failures: int) -> str:
    blocks = [
        f"  ● math › case {n}\n\n    expect(received).toBe(expected)\n\n    Expected: {n + 1}\n"
        f"    Received: {n}\n\n      at Object.<anonymous> (math.test.js:{n + 3}:18)\n"
        for n in range(failures)
    ]
    return (
        "FAIL ./math.test.js\n" + "\n".join(blocks)
        + f"\nTest Suites: 1 failed, 1 total\nTests:       {failures} failed, 3 passed, {failures + 3} total\n"
        "Snapshots:   0 total\nTime:        1.2 s\nRan all test suites.\n"
    )


def vitest_output(failures: int) -> str:
    blocks = [
        f" FAIL  src/math.test.ts > math > case {n}\nAssertionError: expected {n} to be {n + 1}\n"
        f" ❯ src/math.test.ts:{n + 3}:17\n"
        for n in range(failures)
    ]
    return (
        "⎯⎯⎯⎯⎯⎯⎯ Failed Tests " + str(failures) + " ⎯⎯⎯⎯⎯⎯⎯\n\n" + "\n".join(blocks)
        + f"\n Test Files  1 failed (1)\n      Tests  {failures} failed | 3 passed ({failures + 3})\n"
        "   Duration  812ms\n"
    )


def node_spec_output(failures: int) -> str:
    blocks = [
        f"✖ case {n} (0.8ms)\n  AssertionError [ERR_ASSERTION]: Expected values to be strictly equal:\n\n"
        f"  {n} !== {n + 1}\n\n      at TestContext.<anonymous> (t.test.js:{n + 2}:10)\n"
        for n in range(failures)
    ]
    return (
        f"ℹ tests {failures + 1}\nℹ suites 0\nℹ pass 1\nℹ fail {failures}\nℹ cancelled 0\n"
        "ℹ duration_ms 412.5\n\n✖ failing tests:\n\n" + "\n".join(blocks)
    )


def cargo_output(failures: int) -> str:
    running = "".join(f"test tests::case_{n} ... FAILED\n" for n in range(failures))
    blocks = "".join(
        f"---- tests::case_{n} stdout ----\nthread 'tests::case_{n}' panicked at src/lib.rs:{n + 5}:9:\n"
        f"assertion `left == right` failed\n  left: {n}\n right: {n + 1}\n\n"
        for n in range(failures)
    )
    names = "".join(f"    tests::case_{n}\n" for n in range(failures))
    return (
        f"running {failures + 2} tests\ntest tests::fine ... ok\ntest tests::also_fine ... ok\n{running}\n"
        f"failures:\n\n{blocks}\nfailures:\n{names}\n"
        f"test result: FAILED. 2 passed; {failures} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s\n\n"
        "error: test failed, to rerun pass `--lib`\n"
    )


def go_output(failures: int) -> str:
    blocks = "".join(
        f"--- FAIL: TestCase{n} (0.00s)\n    math_test.go:{n + 7}: got {n}, want {n + 1}\n"
        for n in range(failures)
    )
    return blocks + "FAIL\nFAIL\texample.com/math\t0.004s\nFAIL\n"  # go test's default (not -v) report


@pytest.mark.parametrize(
    ("make", "totals", "header"),
    [
        (jest_output, "Tests:       120 failed, 3 passed, 123 total", r"  ● math › case \d+"),
        (vitest_output, "      Tests  120 failed | 3 passed (123)", r" FAIL  src/math\.test\.ts > math > case \d+"),
        (node_spec_output, "ℹ fail 120", r"✖ case \d+ \(0\.8ms\)"),
        (cargo_output, "test result: FAILED. 2 passed; 120 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s", r"---- tests::case_\d+ stdout ----"),
        (go_output, "FAIL\texample.com/math\t0.004s", r"--- FAIL: TestCase\d+ \(0\.00s\)"),
    ],
    ids=["jest", "vitest", "node-test", "cargo-test", "go-test"],
)
def test_each_runner_keeps_its_totals_and_whole_failures(make, totals, header):
    text = make(120)
    out = errors_first(text, limit=3000)
    assert_within_bound(text, out, 3000)
    lines = out.split("\n")
    assert totals in lines
    shown = [line for line in lines if re.fullmatch(header, line)]
    assert shown, out
    assert 0 < hidden_count(out) < 120


def test_go_keeps_the_message_under_its_header():
    lines = errors_first(go_output(120), limit=3000).split("\n")
    first = lines.index("--- FAIL: TestCase0 (0.00s)")
    assert lines[first + 1] == "    math_test.go:7: got 0, want 1"


def test_cargo_keeps_the_panic_with_its_header():
    lines = errors_first(cargo_output(120), limit=3000).split("\n")
    first = lines.index("---- tests::case_0 stdout ----")
    assert lines[first + 1 : first + 5] == [
        "thread 'tests::case_0' panicked at src/lib.rs:5:9:",
        "assertion `left == right` failed",
        "  left: 0",
        " right: 1",
    ]


def test_a_plain_log_is_still_cut_at_its_head():
    noise = [f"step {i} ok" for i in range(2000)]
    text = "\n".join(["error: the one that matters", *noise])
    out = errors_first(text, limit=500)
    assert out.startswith("error: the one that matters\n") and "more failures" not in out


@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=4000))
def test_digest_respects_the_bound_at_any_budget(failures, limit):
    text = cargo_output(failures) + jest_output(failures // 3)
    out = errors_first(text, limit=limit)
    if len(reorder(text)) <= limit:
        assert out == reorder(text)
    else:
        assert_within_bound(text, out, limit)
