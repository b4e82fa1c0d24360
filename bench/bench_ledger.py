#!/usr/bin/env python
"""Ledger retention: a simulated week of 20 agents, compacted while the coordinator serves.

    python bench/bench_ledger.py                  # about a minute on 2 cores
    python bench/bench_ledger.py --tasks 50       # a quick look

The ledger is generated directly (one ``executemany``, timestamps spread over the last
``--days`` days): per agent and day a session joins and leaves, and each task is an
allowed write intent, its auto-claim and the release, ``--tasks`` tasks per agent per
day; one refused claim in ten tasks.  Then a real ``lockstep serve`` on it:

1. **Start-up** on the whole week (a replay: the generated file has no snapshot).
2. **Compaction** ``lockstep ledger compact --keep 1d``: time, events removed, file size.
3. **Serving during compaction**: a client's intent round trips while the compaction
   runs, against the same client's round trips just before (the baseline, same run).
   Target: p99 during compaction <= 5x the baseline p99 (slices keep the loop turning).
4. **Restart** after compaction (a hard kill: the snapshot plus the events after it),
   against figure 1.  The claims live before are checked to be exactly those after.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger import Ledger  # noqa: E402
from ledger import records as rec  # noqa: E402

perf = time.perf_counter
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("LOCKSTEP_ENDPOINT", None)


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def lockstep(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents.cli", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def week(agents: int, days: int, tasks: int, now: float):
    """(ts, record) in time order: the simulated week."""
    token, reserved, epoch_start = 1, 0, now - days * 86400
    out = [(epoch_start, rec.CoordinatorStarted(epoch=1, mode="parallel-strict"))]
    for day in range(days):
        for a in range(agents):
            name, session = f"agent{a:02d}", f"1.{day * agents + a + 1}"
            t = epoch_start + day * 86400 + a * 60
            out.append((t, rec.AgentJoined(agent=name, session=session, kind="session", worktree=f"/w/{name}", host="bench")))
            last = day == days - 1 and a < 5  # five agents still at work at the end, one claim each
            for k in range(tasks):
                t += 86400 / tasks / 2
                path = f"src/m{a:02d}/f{k % 50:02d}.py"
                if token > reserved:
                    reserved = token + 999
                    out.append((t, rec.TokensReserved(upto=reserved)))
                out.append((t, rec.IntentDecided(agent=name, session=session, token=token, verdict="allow", reason="allowed", paths=[path])))
                out.append((t, rec.ClaimGranted(agent=name, session=session, token=token, patterns=[path], auto=True)))
                if k % 10 == 0:
                    other = f"agent{(a + 1) % agents:02d}"
                    out.append((t, rec.ClaimRefused(agent=other, patterns=[path], reason=f"held by {name}")))
                if not (last and k == tasks - 1):
                    out.append((t + 30, rec.ClaimReleased(agent=name, session=session, token=token, patterns=[path], reason="released by holder")))
                token += 1
            if not last:
                out.append((t + 60, rec.AgentLeft(agent=name, session=session, reason="bye")))
    out.sort(key=lambda item: item[0])
    return out


def write_ledger(path: Path, events) -> None:
    with Ledger.open(path):
        pass  # the schema
    rows = []
    for i, (ts, record) in enumerate(events, start=1):
        rows.append((i, ts, 1, record.KIND, record.agent, record.session, record.token, rec.encode_data(record).decode()))
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany("INSERT INTO events (id, ts, epoch, kind, agent, session, token, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.close()


def serve(repo: Path) -> tuple[subprocess.Popen, float]:
    t = perf()
    proc = subprocess.Popen([sys.executable, "-m", "agents.cli", "serve", "--heartbeat", "30", "--liveness", "100"],
                            cwd=repo, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = repo / ".git" / "lockstep" / "coordinator.json"
    deadline = time.monotonic() + 600
    while True:
        try:
            if json.loads(state.read_text()).get("pid") == proc.pid:
                return proc, perf() - t
        except (OSError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the coordinator did not start")
        time.sleep(0.01)


def claims(repo: Path) -> list:
    status = json.loads(lockstep(repo, "status", "--json").stdout)
    return sorted((c["pattern"], c["holder"], c["token"]) for c in status["claims"])


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=200, help="tasks per agent per day")
    args = parser.parse_args()
    print(f"$ python bench/bench_ledger.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"{args.agents} agents, {args.days} days, {args.tasks} tasks per agent per day; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="lockstep-ledger-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "-c", "user.email=b@example.com", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "init")
        state = repo / ".git" / "lockstep"
        state.mkdir(mode=0o700)
        t = perf()
        events = week(args.agents, args.days, args.tasks, time.time())
        write_ledger(state / "ledger.db", events)
        generated = perf() - t
        size = (state / "ledger.db").stat().st_size
        print(f"\ngenerated {len(events)} events ({size / 1e6:.1f} MB) in {generated:.1f} s")

        proc, first_start = serve(repo)
        try:
            live = claims(repo)
            print(f"1. start-up, replaying the week: {first_start:.2f} s ({len(live)} live claims)")
            # 3. a client's intents: a baseline, then during the compaction
            from agents.oneshot import open_oneshot

            with open_oneshot("probe", cwd=repo, on_notice=lambda text: None) as session:
                def intents(n: int | None, stop: threading.Event | None = None) -> list[float]:
                    out, k = [], 0
                    while (n is not None and k < n) or (stop is not None and not stop.is_set()):
                        t = perf()
                        session.intent([f"probe/f{k % 20}.py"])
                        out.append(perf() - t)
                        k += 1
                    return out

                intents(50)  # warm-up
                baseline = intents(400)
                done = threading.Event()
                result: dict = {}

                def compact() -> None:
                    t = perf()
                    result["reply"] = lockstep(repo, "ledger", "compact", "--keep", "1d", "--json")
                    result["seconds"] = perf() - t
                    done.set()

                worker = threading.Thread(target=compact)
                worker.start()
                during = intents(None, done)
                worker.join()
            reply = result["reply"]
            if reply.returncode != 0:
                raise SystemExit(f"compaction failed: {reply.stderr}")
            data = json.loads(reply.stdout)
            print(f"2. compaction --keep 1d: {result['seconds']:.2f} s; {data['removed']} events removed, {data['kept']} kept; "
                  f"file {data['db_size_bytes'] / 1e6:.1f} MB (its free pages are reused), WAL {data['wal_size_bytes'] / 1e6:.1f} MB")
            b99, d99 = pct(baseline, 0.99) * 1000, pct(during, 0.99) * 1000
            print(f"3. intent p99 while compacting: {d99:.2f} ms ({len(during)} intents) vs {b99:.2f} ms before (baseline) "
                  f"= {d99 / b99:.2f} x (target <= 5); p50 {pct(during, 0.5) * 1000:.2f} vs {pct(baseline, 0.5) * 1000:.2f} ms")
            before = claims(repo)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        proc, second_start = serve(repo)
        try:
            after = claims(repo)
        finally:
            lockstep(repo, "stop")
            proc.wait(30)
        same = "the same claims" if after == before else "DIFFERENT claims"
        print(f"4. restart after compaction (killed: snapshot + the events after it): {second_start:.2f} s vs {first_start:.2f} s; {same}")
        met = d99 / b99 <= 5 and after == before
        print(f"\ntargets {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
