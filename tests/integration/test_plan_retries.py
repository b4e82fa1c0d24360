"""Plans against a real coordinator and git repository: ``retries`` are spent before
``on_post_fail = "rollback"`` (retry, then roll back), ``plan status`` says why a plan
ended, and a plan's probes feed the rules like any other producer (a real local http
service that fails)."""

from __future__ import annotations

import json
import sys

from .conftest import cli
from .test_rules_e2e import _service, _url

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")

RETRY_THEN_ROLL_BACK = """
[plan]
name = "deploy"

[[step]]
id = "build"
run = "{py} -c \\"import os; os.makedirs('dist', exist_ok=True); open('dist/app.js', 'w').write('v2')\\""
rollback = "rm -rf dist"

[[step]]
id = "upload"
run = "{py} -c \\"open('upload.log', 'a').write('attempt\\\\n'); raise SystemExit(1)\\""
on_post_fail = "rollback"
retries = 2
"""


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "1000", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def test_a_failing_step_is_retried_then_the_previous_step_rolled_back(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "PLAN.toml").write_text(RETRY_THEN_ROLL_BACK.format(py=sys.executable))
    ran = cli("plan", "run", "PLAN.toml", "--json", cwd=repo.root, timeout=120)
    assert ran.rc == 1 and ran.json["verdict"] == "fail", ran
    assert (repo.root / "upload.log").read_text().splitlines() == ["attempt"] * 3  # the first run and 2 retries
    assert not (repo.root / "dist").exists()  # then build was rolled back
    upload = [(e["kind"], e["data"]["attempt"]) for e in _ledger(repo, "plan.*") if e["data"]["step"] == "upload"]
    assert upload == [
        ("plan.step.started", 1), ("plan.step.retry", 2), ("plan.step.retry", 3),
        ("plan.step.rolling_back", 3), ("plan.step.rolled_back", 3), ("plan.failed", 3),
    ]
    status = cli("plan", "status", "--json", cwd=repo.root).json[0]
    assert status["state"] == "failed" and {s["id"]: s["attempt"] for s in status["steps"]}["upload"] == 3
    text = cli("plan", "status", cwd=repo.root).out
    assert "failed: step 'upload' failed; previous step 'build' was rolled back" in text


def test_a_plans_failing_probe_goes_through_the_rules(repo, coordinator):
    server = _service(repo.root / "up")
    try:
        (repo.root / "lockstep.toml").write_text(
            '[[rule]]\nfinding = "endpoint failing"\nresponse = "queue_task"\ntask = "look at the health endpoint"\nagent = "ops"\n'
        )
        coordinator(*FAST)
        (repo.root / "PLAN.toml").write_text(
            '[plan]\nname = "smoke"\n\n[[step]]\nid = "smoke"\nrun = "true"\n'
            f'post = [{{ kind = "http", url = "{_url(server)}" }}]\n'
        )
        ran = cli("plan", "run", "PLAN.toml", "--json", cwd=repo.root, timeout=120)
        assert ran.rc == 1 and ran.json["verdict"] == "escalate", ran
        (response,) = _ledger(repo, "rule.response")
        assert response["data"]["job"] == ran.json["job"] and response["data"]["action"] == "queue_task"
        assert response["data"]["probes"] == ["smoke.post.1"]
        tasks = cli("tasks", "--json", cwd=repo.root).json["tasks"]
        assert [(t["agent"], t["task"], t["because"]) for t in tasks] == [("ops", "look at the health endpoint", "endpoint failing")]
    finally:
        server.shutdown()
        server.server_close()
