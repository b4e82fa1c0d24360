"""The job runner (coordinator/jobs.py) with a real core, a real probe pool running
real commands, and a real git repository; the shell around it is the few lines
``Shell`` below (what server.py does with effects, minus sockets and the ledger file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import trio

from coordinator import jobs as jobs_module
from coordinator.core import Core
from coordinator.effects import Publish, Send, StartJob
from coordinator.jobs import JobRunner
from coordinator.settings import Settings
from ledger.records import Record
from probes.pool import open_probe_pool
from protocol import messages as m
from protocol.discovery import locate

TIMEOUT = 60  # seconds: the pool starts worker processes on a shared 2-core machine


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    return root


class Shell:
    """Carries out the core's effects as the server does: records are kept (in order),
    jobs are started in the nursery, publications are observed, replies are kept."""

    def __init__(self, core: Core, nursery: trio.Nursery) -> None:
        self.core = core
        self.nursery = nursery
        self.records: list[Record] = []
        self.replies: list[m.Message] = []
        self.runner: JobRunner

    async def apply(self, call) -> None:
        self.execute(call(trio.current_time()))

    def execute(self, effects: list) -> None:
        for effect in effects:
            match effect:
                case Record():
                    self.records.append(effect)
                case StartJob():
                    self.runner.start(self.nursery, effect)
                case Publish(message=message):
                    self.runner.observe(self.nursery, message)
                case Send(message=message):
                    self.replies.append(message)

    def send(self, message: m.Message) -> m.Message:
        self.execute(self.core.receive("peer", message, trio.current_time()))
        return self.replies[-1]

    def kinds(self) -> list[str]:
        return [r.KIND for r in self.records]

    async def finished(self, job: str) -> m.JobReply:
        while True:
            (reply,) = [e.message for e in self.runner.answer("peer", m.JobQuery(job=job))]
            if isinstance(reply, m.JobReply) and reply.state == "finished":
                return reply
            await trio.sleep(0.02)


async def _shell(repo: Path, nursery: trio.Nursery, pool, core: Core | None = None) -> Shell:
    if core is None:
        core = Core(Settings(), repo=locate(repo).repo_id, host="testhost")
        core.start([], trio.current_time())
    shell = Shell(core, nursery)
    shell.runner = JobRunner(core, shell.apply, pool, repo, repo / ".git" / "lockstep")
    return shell


def _check(repo: Path, shell_cmd: str, name: str = "cmd") -> m.Check:
    probe = m.ProbeRequest(kind="command", name=name, params={"shell": shell_cmd})
    return m.Check(probe=probe, cwd=str(repo))


async def test_a_check_records_its_result_before_its_gate_and_answers_queries(repo):
    with trio.fail_after(TIMEOUT):
        async with open_probe_pool(1) as pool, trio.open_nursery() as nursery:
            shell = await _shell(repo, nursery, pool)
            accepted = shell.send(_check(repo, "true"))
            assert isinstance(accepted, m.Accepted) and accepted.checks == ["cmd"]
            reply = await shell.finished(accepted.job)
            assert reply.gate.verdict == "pass" and (reply.done, reply.total) == (1, 1)
            assert shell.kinds()[-3:] == ["job.started", "probe.result", "job.finished"]
            result = shell.records[-2]
            assert (result.job, result.name, result.verdict) == (accepted.job, "cmd", "pass")
            nursery.cancel_scope.cancel()


async def test_a_failing_check_goes_through_the_rules_and_the_decision_is_recorded_first(repo):
    with trio.fail_after(TIMEOUT):
        async with open_probe_pool(1) as pool, trio.open_nursery() as nursery:
            shell = await _shell(repo, nursery, pool)
            accepted = shell.send(_check(repo, "exit 3"))
            reply = await shell.finished(accepted.job)
            assert reply.gate.verdict == "fail"
            kinds = shell.kinds()
            assert kinds.index("probe.result") < kinds.index("rule.decided") < kinds.index("rule.response") < kinds.index("job.finished")
            (response,) = reply.gate.responses
            assert response["action"] == "notify" and response["outcome"] == "operator notified"
            nursery.cancel_scope.cancel()


async def test_the_runner_holds_no_retry_count_the_core_does(repo):
    """A new runner (as after a restart of the shell) continues the core's count."""
    lost = m.Check(probe=m.ProbeRequest(kind="write", params={"path": "a.txt", "sha256": "0" * 64}), cwd=str(repo))
    with trio.fail_after(TIMEOUT):
        async with open_probe_pool(1) as pool, trio.open_nursery() as nursery:
            first = await _shell(repo, nursery, pool)
            await first.finished(first.send(lost).job)
            second = await _shell(repo, nursery, pool, core=first.core)
            reply = await second.finished(second.send(lost).job)
            (response,) = reply.gate.responses
            assert (response["action"], response["params"]["attempt"]) == ("retry", 2)
            nursery.cancel_scope.cancel()


async def test_a_check_outside_this_repository_fails_its_gate(repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _git(elsewhere, "init", "-q")
    with trio.fail_after(TIMEOUT):
        async with open_probe_pool(1) as pool, trio.open_nursery() as nursery:
            shell = await _shell(repo, nursery, pool)
            accepted = shell.send(m.Check(probe=m.ProbeRequest(kind="command", params={"shell": "true"}), cwd=str(elsewhere)))
            reply = await shell.finished(accepted.job)
            assert reply.gate.verdict == "fail" and "not in a worktree of" in reply.gate.reason
            assert "probe.result" not in shell.kinds()
            nursery.cancel_scope.cancel()


async def test_an_unknown_job_is_bad_input(repo):
    with trio.fail_after(TIMEOUT):
        async with open_probe_pool(1) as pool, trio.open_nursery() as nursery:
            shell = await _shell(repo, nursery, pool)
            (reply,) = [e.message for e in shell.runner.answer("peer", m.JobQuery(req=4, job="9.9"))]
            assert isinstance(reply, m.Error) and (reply.code, reply.req) == ("bad_request", 4)
            nursery.cancel_scope.cancel()


async def test_finished_jobs_are_forgotten_oldest_first_but_never_a_running_one(repo, monkeypatch):
    monkeypatch.setattr(jobs_module, "KEEP_FINISHED_JOBS", 2)
    gate = repo / "release"
    with trio.fail_after(TIMEOUT):
        async with open_probe_pool(2) as pool, trio.open_nursery() as nursery:
            shell = await _shell(repo, nursery, pool)
            slow = shell.send(_check(repo, f"while [ ! -e {gate} ]; do sleep 0.02; done", "slow")).job
            quick = []
            for _ in range(3):
                job = shell.send(_check(repo, "true")).job
                await shell.finished(job)
                quick.append(job)
            known = lambda job: isinstance(shell.runner.answer("peer", m.JobQuery(job=job))[0].message, m.JobReply)  # noqa: E731
            assert known(slow)  # running: kept although it is the oldest
            gate.write_text("go")
            await shell.finished(slow)
            shell.send(_check(repo, "true"))  # the next start trims the finished ones
            assert not known(slow) and not known(quick[0])
            nursery.cancel_scope.cancel()
