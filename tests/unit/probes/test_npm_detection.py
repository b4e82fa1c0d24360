"""Detected npm checks run each script once and never a post-script (npm audit and
the like need the network and are not part of a check)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from probes.suite import detect_suite, npm_checks

# minimist's shape: the linter runs from pretest, and posttest audits.
MINIMIST_LIKE = {"lint": "eslint --ext=js,mjs .", "pretest": "npm run lint", "test": "tape test/*.js", "posttest": "npm audit"}


def test_test_alone_when_pretest_runs_the_linter_and_no_posttest():
    checks = npm_checks(MINIMIST_LIKE)
    assert [(c.name, c.cmd) for c in checks] == [
        ("npm-test", "npm run pretest --ignore-scripts && npm run test --ignore-scripts"),
    ]
    assert "posttest" in checks[0].why and "already runs lint" in checks[0].why


def test_the_lint_command_itself_inside_test_counts_too():
    checks = npm_checks({"lint": "eslint .", "test": "eslint . && jest"})
    assert [c.name for c in checks] == ["npm-test"]


def test_without_post_scripts_each_runs_as_npm_run():
    checks = npm_checks({"test": "jest", "pretest": "tsc", "lint": "eslint .", "typecheck": "tsc --noEmit"})
    assert [(c.name, c.cmd) for c in checks] == [
        ("npm-typecheck", "npm run typecheck"),
        ("npm-test", "npm run test"),
        ("npm-lint", "npm run lint"),
    ]
    assert "pretest" in checks[1].why


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_detected_npm_checks_really_run_the_linter_once_and_no_posttest(tmp_path):
    ran = tmp_path / "ran.txt"
    scripts = {
        name: f"echo {name} >> {ran}" for name in ("lint", "test", "posttest", "prelint")
    } | {"pretest": "npm run lint"}
    (tmp_path / "package.json").write_text(json.dumps({"name": "demo", "version": "1.0.0", "scripts": scripts}))
    for check in detect_suite(tmp_path):
        subprocess.run(check.cmd, shell=True, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    assert ran.read_text().split() == ["lint", "test"]
