"""`[coordinator] fsync`: with "power-loss" every batch is fsynced before its replies
leave (group commit: one batch, one commit, one fsync); with "process-crash" (the
default) commits are not fsynced.  A real coordinator, traced with strace: the fsyncs of
its ledger's WAL are counted while one client makes serial claims (one batch each)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time

import pytest

from protocol import messages as m
from protocol.codec import encode

from .conftest import cli, status, wait_until
from .test_bad_input import RawClient

STEADY = ("--heartbeat", "1", "--liveness", "30")
CLAIMS = 30


def _traced_fsyncs_during_claims(repo, c) -> int:
    """fsync/fdatasync calls on the ledger's WAL while CLAIMS serial claims are answered."""
    trace = repo.root.parent / "fsync.trace"
    tracer = subprocess.Popen(
        ["strace", "-f", "-y", "-e", "trace=fsync,fdatasync", "-o", str(trace), "-p", str(c.pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = tracer.stderr.readline()  # "strace: Process N attached ..." or why not
        if "attached" not in line:
            tracer.wait(10)
            pytest.skip(f"cannot trace the coordinator here: {line.strip() or tracer.stderr.read().strip()}")
        raw = RawClient(json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0])
        try:
            raw.send(encode(m.Hello(agent="writer", req=1)))
            session = raw.reply().session
            before = _wal_syncs(trace)
            for i in range(CLAIMS):
                raw.send(encode(m.Claim(session=session, paths=[f"src/f{i}.py"], req=2 + i)))
                assert isinstance(raw.reply(), m.Granted)
            time.sleep(0)  # the last reply arrived: its batch's fsync (if any) came before it
            return _wal_syncs(trace) - before
        finally:
            raw.close()
    finally:
        tracer.terminate()
        tracer.wait(10)


def _wal_syncs(trace) -> int:
    try:
        text = trace.read_text()
    except FileNotFoundError:
        return 0
    return len(re.findall(r"f(?:data)?sync\(\d+<[^>]*ledger\.db-wal>\)\s+=\s+0", text))


needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


@needs_strace
def test_power_loss_durability_fsyncs_every_batch_before_its_reply(repo, coordinator):
    c = coordinator(*STEADY, "--fsync", "power-loss")
    assert status(repo)["statistics"]["durability"] == "power-loss"
    # Each serial claim is one batch, answered only after its commit: one fsync each.
    assert _traced_fsyncs_during_claims(repo, c) >= CLAIMS
    ledger = status(repo)["statistics"]["ledger"]
    assert ledger["fsync_every_commit"] and ledger["durable_transactions"] == ledger["transactions"]


@needs_strace
def test_process_crash_durability_does_not_fsync_each_batch(repo, coordinator):
    c = coordinator(*STEADY)
    assert status(repo)["statistics"]["durability"] == "process-crash"
    assert _traced_fsyncs_during_claims(repo, c) < CLAIMS // 2  # token reservations only


def test_fsync_mode_comes_from_lockstep_toml_and_status_shows_it(repo, coordinator):
    (repo.root / "lockstep.toml").write_text('[coordinator]\nfsync = "power-loss"\n')
    coordinator(*STEADY)
    assert status(repo)["statistics"]["durability"] == "power-loss"
    text = cli("status", cwd=repo.root)
    assert text.rc == 0 and "durability power-loss" in text.out.splitlines()[0]


def test_an_unknown_fsync_mode_is_a_usage_error(repo):
    (repo.root / "lockstep.toml").write_text('[coordinator]\nfsync = "sometimes"\n')
    result = cli("serve", cwd=repo.root, timeout=30)
    assert result.rc == 2 and "fsync" in result.err and "\n" not in result.err.strip()
    wait_until(lambda: not (repo.state_dir / "coordinator.json").exists(), timeout=5, what="no coordinator")
