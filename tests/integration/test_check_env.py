"""Where checks run and what is kept of them, end to end: a real coordinator, real
commands, real git worktrees (and, for the editable-install case, a real venv)."""

from __future__ import annotations

import sys

from .conftest import cli

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")

# Prints 4000 numbered lines, one failure in the middle, and exits 1: far more than
# the report's budget.
LOUD_CHECK = (
    "import sys\n"
    "for n in range(4000):\n"
    "    print(f'line {n} of the run')\n"
    "    if n == 2000: print('E   assert the middle failed', file=sys.stderr)\n"
    "sys.exit(1)\n"
)


def test_the_whole_output_of_every_check_is_kept_and_printed_by_verify_full(repo, coordinator):
    (repo.root / "loud.py").write_text(LOUD_CHECK)
    (repo.root / "lockstep.toml").write_text(
        f'[checks.loud]\ncmd = "{sys.executable} loud.py"\n\n[checks.quiet]\ncmd = "{sys.executable} -c pass"\n'
    )
    coordinator(*FAST)
    failed = cli("verify", "--json", cwd=repo.root)
    assert failed.rc == 1
    by_name = {r["name"]: r for r in failed.json["results"]}
    log = by_name["loud"]["details"]["log"]
    assert log.startswith(str(repo.state_dir / "checks"))
    kept = open(log, encoding="utf-8").read()
    assert kept.count("of the run\n") == 4000 and "E   assert the middle failed" in kept
    assert len(by_name["loud"]["output"]) < len(kept)  # the report is the cut one
    assert by_name["quiet"]["details"]["log"] != log  # one file per check

    human = cli("verify", cwd=repo.root)
    assert "full output: " in human.err
    job = failed.json["job"]
    full = cli("verify", "--full", job, cwd=repo.root)
    assert full.rc == 0 and full.out.count("of the run\n") == 4000 and "── loud" in full.out
    as_json = cli("verify", "--full", job, "--json", cwd=repo.root)
    assert {c["check"] for c in as_json.json["checks"]} == {"loud", "quiet"}
    missing = cli("verify", "--full", "0.999", cwd=repo.root)
    assert missing.rc == 1 and "no output kept for job '0.999'" in missing.err
