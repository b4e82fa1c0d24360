"""``lockstep plan stop`` from another host: a remote agent's key may stop the plans it
runs (on its own worker), never anyone else's (``forbidden``).  A real coordinator
serving ``--curve`` on loopback, a real ``lockstep worker`` in a joined clone."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import cli, end_process, pid_gone, wait_until
from .test_plan_stop import PLAN, _hanging_pid
from .test_remote_cancel import _joined_with_a_worker


def _plan_file(where: Path, name: str, pidfile: Path) -> Path:
    path = where / f"{name}.toml"
    path.write_text(PLAN.format(name=name, pidfile=pidfile))
    return path


def _state(root: Path, job: str) -> str:
    (summary,) = cli("plan", "status", job, "--json", cwd=root).json
    return summary["state"]


def test_a_remote_agent_stops_its_own_plan_and_is_forbidden_anyone_elses(tmp_path: Path, coordinator_in):
    origin, clone, worker = _joined_with_a_worker(tmp_path, coordinator_in)
    try:
        host_pid, alice_pid = tmp_path / "host.pid", tmp_path / "alice.pid"
        host_plan = _plan_file(origin.root, "deploy", host_pid)
        host_job = cli("plan", "run", str(host_plan), "--detach", "--json", cwd=origin.root).json["job"]
        alice_plan = _plan_file(clone, "mine", alice_pid)
        started = cli("plan", "run", str(alice_plan), "--detach", "--json", cwd=clone)
        assert started.rc == 0, started
        alice_job = started.json["job"]
        host_step, alice_step = _hanging_pid(host_pid), _hanging_pid(alice_pid)

        for target in ("deploy", host_job):  # by name or by job id: the host's plan is not alice's
            refused = cli("plan", "stop", target, "--reason", "not mine", "--json", cwd=clone)
            assert refused.rc == 1 and refused.json["error"]["code"] == "forbidden", refused
            assert "alice" in refused.json["error"]["message"] and host_job in refused.json["error"]["message"]
        forged = cli("plan", "stop", "deploy", "--agent", "ops", "--json", cwd=clone)  # another name changes nothing
        assert forged.rc == 1 and forged.json["error"]["code"] == "forbidden", forged
        assert _state(origin.root, host_job) == "running" and not pid_gone(host_step)

        stopped = cli("plan", "stop", "mine", "--reason", "wrong tag", "--agent", "ops", "--json", cwd=clone, timeout=90)
        assert stopped.rc == 0, stopped
        assert stopped.json["job"] == alice_job and stopped.json["state"] == "stopped"
        assert "stopped by alice at step 'hang': wrong tag" in stopped.json["reason"]  # the key's name, not --agent
        wait_until(lambda: pid_gone(alice_step), timeout=15, what="alice's step to end on her worker's host")
        assert _state(origin.root, host_job) == "running" and not pid_gone(host_step)

        tail = cli("ledger", "tail", "-n", "500", "--json", cwd=origin.root).out.splitlines()
        records = [json.loads(line) for line in tail]
        assert [r["data"]["job"] for r in records if r["kind"] == "plan.stopped"] == [alice_job]
        assert cli("status", "--json", cwd=origin.root).json["statistics"]["remote"]["forbidden"] == 3

        # the host's own operator may stop it
        assert cli("plan", "stop", host_job, "--json", cwd=origin.root, timeout=90).rc == 0
        wait_until(lambda: pid_gone(host_step), timeout=15, what="the host's step to end")
    finally:
        end_process(worker)
