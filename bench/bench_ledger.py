#!/usr/bin/env python
"""Ledger retention: a simulated week of 20 agents under the default policy.

    python bench/bench_ledger.py                          # the week: ~6M events, ~15 min on 2 cores
    python bench/bench_ledger.py --days 2 --rate 5000     # a quick look

The week is generated fast, not in real time: each simulated day's events are written
straight into the ledger with ``executemany`` (real records of ``ledger.records``, encoded
as the coordinator encodes them, timestamps spread over that day) while no coordinator
runs; then a real ``lockstep serve`` starts on it and applies the policy by itself
(``[ledger] keep`` and ``max_size``, defaults unless given).  The load is the issue's
soak: ``--rate`` events an hour for 20 agents (35,000), made of write intents every ~3 s
per agent (a quarter of them auto-claiming a new path), a release every ~30 s, a verify
run every ~10 minutes (job, two results, its end), sessions that open each morning and
end each evening (five agents still at work, holding a claim, at the end).

Per simulated day:

1. **Start-up** replaying the day (the direct inserts bypass the coordinator's periodic
   snapshots, so this start replays a whole day: not the target, for scale).
2. **The policy**: once the pages in use pass ``max_size``, the coordinator removes the
   oldest events (snapshot first) and returns the space; the bench waits until it is done
   and the file is back under the budget: the file and WAL sizes, events kept, the time.
3. **Restart after compaction** (a hard kill, then ``serve``: the snapshot plus the few
   events after it), target <= 5 s; the claims before the kill are checked to be exactly
   those after.  Beside it, how long ``lockstep --version`` took just before: the floor
   of any start on this machine at that moment.

On the last day, before its events are written, a client's intent round trips are
measured while the coordinator is idle (the baseline); then, after the restart that
replays that day, the same client sends intents back to back while the policy's
compaction runs (at most ``--probe-seconds``), and again right after it (a second
baseline, same process).  Target: p99 during compaction <= 2x the baseline p99.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger import Ledger  # noqa: E402
from ledger import records as rec  # noqa: E402
from probes.schema import dec_hook  # noqa: E402
from probes.settings import LedgerConfig  # noqa: E402

perf = time.perf_counter
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop("LOCKSTEP_ENDPOINT", None)
AGENTS_AT_WORK = 5  # agents whose last session is still open at the end, one claim each


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def lockstep(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agents.cli", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


class Week:
    """The simulated agents' state across days: tokens, open sessions, held paths."""

    def __init__(self, agents: int, rate: int, days: int, start: float, seed: int = 1) -> None:
        self.agents, self.days, self.start = agents, days, start
        self.random = random.Random(seed)
        # events an hour per agent -> intents per hour per agent (see the docstring's mix)
        self.intents_per_hour = max(4, int(rate / agents / 1.37))
        self.token, self.reserved, self.job = 1, 0, 0
        self.encode = rec.encode_data

    def rows(self, day: int, first_id: int) -> list[tuple]:
        """Day ``day``'s events as rows of ``events``, ids from ``first_id``."""
        out: list[tuple] = []
        add = out.append
        enc = self.encode
        rnd = self.random
        day_start = self.start + day * 86400
        last_day = day == self.days - 1

        def put(ts: float, r: rec.Record) -> None:
            add((ts, r.KIND, r.agent, r.session, r.token, enc(r).decode()))

        if day == 0:
            put(day_start, rec.CoordinatorStarted(epoch=1, mode="parallel-strict"))
        hours = 22
        per_agent = self.intents_per_hour * hours
        step = hours * 3600 / per_agent
        for a in range(self.agents):
            name, session = f"agent{a:02d}", f"1.{day * self.agents + a + 1}"
            worktree = f"/home/dev/src/project/.worktrees/{name}"
            t = day_start + 600 + a * 7
            put(t, rec.AgentJoined(agent=name, session=session, kind="run", worktree=worktree, host="devbox", pid=40000 + a, pid_started=t))
            held: list[str] = []
            for k in range(per_agent):
                t += step
                # each agent works in its own files (the gate would refuse the others')
                module = f"src/project/{('core', 'api', 'cli', 'store', 'web')[a % 5]}/a{a:02d}_module_{rnd.randrange(400):03d}.py"
                if self.token > self.reserved:
                    self.reserved = self.token + 999
                    put(t, rec.TokensReserved(upto=self.reserved))
                new = k % 4 == 0 or not held
                path = module if new else rnd.choice(held)
                put(t, rec.IntentDecided(agent=name, session=session, token=self.token, verdict="allow",
                                         reason="allowed: the paths are free or yours", paths=[path]))
                if new and path not in held:
                    put(t, rec.ClaimGranted(agent=name, session=session, token=self.token, patterns=[path], auto=True))
                    held.append(path)
                    self.token += 1
                if k % 10 == 5 and held:  # every ~30 s: release what is held
                    put(t + 1, rec.ClaimReleased(agent=name, session=session, patterns=held, reason="released by holder"))
                    held = []
                if k % 200 == 100:  # every ~10 min: a verify run
                    self.job += 1
                    job = f"1.{self.job}"
                    put(t + 2, rec.JobStarted(agent=name, session=session, job=job, kind="verify", cwd=worktree))
                    for check in ("tests", "lint"):
                        put(t + 20, rec.VerifyResult(agent=name, session=session, job=job, name=check, kind="command",
                                                     target=check, verdict="pass", exit_code=0, duration=17.5,
                                                     reason="exit 0", output="412 passed in 17.02s"))
                    put(t + 21, rec.VerifyFinished(agent=name, session=session, job=job, kind="verify", verdict="pass",
                                                   passed=True, tree="4b825dc642cb6eb9a060e54bf8d69288fbe4904" + str(k % 10)))
            at_work = last_day and a < AGENTS_AT_WORK
            if at_work:
                keep = "src/project/held_%02d.py" % a
                if held:
                    put(t + 1, rec.ClaimReleased(agent=name, session=session, patterns=held, reason="released by holder"))
                put(t + 2, rec.ClaimGranted(agent=name, session=session, token=self.token, patterns=[keep]))
                self.token += 1
            else:
                if held:
                    put(t + 1, rec.ClaimReleased(agent=name, session=session, patterns=held, reason="released by holder"))
                put(t + 60, rec.AgentLeft(agent=name, session=session, reason="process 40000 exited"))
        out.sort(key=lambda row: row[0])
        return [(first_id + i, ts, 1, *rest) for i, (ts, *rest) in enumerate(out)]


def insert(path: Path, rows: list[tuple]) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # generating the history, not measuring it
    with conn:
        conn.executemany("INSERT INTO events (id, ts, epoch, kind, agent, session, token, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def serve(repo: Path) -> tuple[subprocess.Popen, float]:
    t = perf()
    proc = subprocess.Popen([sys.executable, "-m", "agents.cli", "serve", "--heartbeat", "30", "--liveness", "100"],
                            cwd=repo, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = repo / ".git" / "lockstep" / "coordinator.json"
    deadline = time.monotonic() + 900
    while True:
        try:
            if json.loads(state.read_text()).get("pid") == proc.pid:
                return proc, perf() - t
        except (OSError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the coordinator did not start")
        time.sleep(0.01)


def status(repo: Path) -> dict:
    reply = lockstep(repo, "status", "--json")
    if reply.returncode != 0:
        raise SystemExit(f"status failed: {reply.stderr}")
    return json.loads(reply.stdout)


def claims(repo: Path) -> list:
    return sorted((c["pattern"], c["holder"], c["token"]) for c in status(repo)["claims"])


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def sizes(state: Path) -> tuple[int, int]:
    def size(name: str) -> int:
        try:
            return (state / name).stat().st_size
        except FileNotFoundError:
            return 0

    return size("ledger.db"), size("ledger.db-wal")


def settle(repo: Path, state: Path, budget: int, timeout: float = 1800) -> tuple[dict, float]:
    """Wait until the policy is done: no compaction running, the file under the budget
    and the WAL emptied by the idle checkpoint.  Returns (retention statistics, seconds)."""
    t = perf()
    deadline = time.monotonic() + timeout
    while True:
        retention = status(repo)["statistics"]["retention"]
        db, wal = sizes(state)
        if not retention["compacting"] and db <= budget and wal == 0:
            return retention, perf() - t
        if time.monotonic() > deadline:
            raise SystemExit(f"the policy did not settle: {retention}, file {db}, WAL {wal}")
        time.sleep(0.5)


def intents(session, count: int | None = None, until=None) -> list[float]:
    out, k = [], 0
    while (count is not None and k < count) or (until is not None and not until()):
        t = perf()
        session.intent([f"probe/f{k % 20}.py"])
        out.append(perf() - t)
        k += 1
    return out


def main() -> None:
    defaults = LedgerConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rate", type=int, default=35_000, help="events an hour, all agents together")
    parser.add_argument("--max-size", default=None, help="[ledger] max_size (default: the default, %s)" % defaults.max_size)
    parser.add_argument("--keep", default=None, help="[ledger] keep (default: the default, 30d)")
    parser.add_argument("--probe-seconds", type=float, default=30.0, help="longest measurement of intents during compaction")
    args = parser.parse_args()
    import msgspec

    policy = msgspec.convert({k: v for k, v in (("keep", args.keep), ("max_size", args.max_size)) if v is not None},
                             LedgerConfig, dec_hook=dec_hook)
    print(f"$ python bench/bench_ledger.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"{args.agents} agents, {args.days} days, {args.rate} events/hour; policy keep {policy.keep / 86400:g}d, "
          f"max_size {policy.max_size / 1e6:g} MB; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    from agents.oneshot import open_oneshot

    with tempfile.TemporaryDirectory(prefix="lockstep-ledger-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        git(repo, "-c", "user.email=b@example.com", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "init")
        lines = ["[ledger]"]
        if args.keep:
            lines.append(f'keep = "{args.keep}"')
        if args.max_size:
            lines.append(f'max_size = "{args.max_size}"')
        (repo / "lockstep.toml").write_text("\n".join(lines) + "\n")
        state = repo / ".git" / "lockstep"
        state.mkdir(mode=0o700)
        path = state / "ledger.db"
        with Ledger.open(path):
            pass  # the schema (auto_vacuum=INCREMENTAL)
        week = Week(args.agents, args.rate, args.days, time.time() - args.days * 86400)
        generated, total_gen = 0, 0.0
        restarts, floors, worst_size, worst_after = [], [], 0, 0
        print("\nday | events written | start-up (replay) | policy: removed, s | file MB | WAL MB | events kept | restart s (python --version) | same claims")
        proc = None
        b99 = d99 = a99 = None
        for day in range(args.days):
            last = day == args.days - 1
            if last and proc is not None:  # the baseline, on an idle coordinator
                with open_oneshot("probe", cwd=repo, on_notice=lambda text: None) as session:
                    intents(session, 50)
                    baseline = intents(session, 1000)
            if proc is not None:
                lockstep(repo, "stop")
                proc.wait(60)
            with sqlite3.connect(path) as conn:
                first_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM events").fetchone()[0]
            conn.close()
            t = perf()
            rows = week.rows(day, first_id)
            insert(path, rows)
            total_gen += perf() - t
            generated += len(rows)
            worst_size = max(worst_size, sum(sizes(state)))
            proc, started = serve(repo)
            compacting: list[float] = []
            if last:  # intents while the policy compacts, then right after
                with open_oneshot("probe", cwd=repo, on_notice=lambda text: None) as session:
                    deadline = time.monotonic() + 120
                    while status(repo)["statistics"]["retention"]["compacting"] != "max_size":
                        if time.monotonic() > deadline:
                            raise SystemExit("the policy did not start compacting")
                        time.sleep(0.05)
                    end = time.monotonic() + args.probe_seconds
                    compacting = intents(session, until=lambda: time.monotonic() > end)
                    retention, took = settle(repo, state, policy.max_size)
                    after = intents(session, 1000)
                b99, d99, a99 = (pct(x, 0.99) * 1000 for x in (baseline, compacting, after))
            else:
                retention, took = settle(repo, state, policy.max_size)
            db, wal = sizes(state)
            worst_after = max(worst_after, db + wal)
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                kept = conn.execute("SELECT count(*) FROM events").fetchone()[0]
            conn.close()
            before = claims(repo)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            t = perf()
            lockstep(repo, "--version")  # the floor: starting Python and the CLI, on this machine now
            floor = perf() - t
            proc, restart = serve(repo)
            restarts.append(restart)
            floors.append(floor)
            same = claims(repo) == before
            last_pass = retention["last"]
            removed = f"{last_pass.get('removed', 0)} ({last_pass.get('by', '')}), {took:.1f}" if last_pass.get("by") == "max_size" else "—"
            print(f"{day + 1} | {len(rows)} | {started:.2f} s | {removed} | {db / 1e6:.0f} | {wal / 1e6:.1f} | {kept} | {restart:.2f} ({floor:.2f}) | {'yes' if same else 'NO'}")
            if not same:
                raise SystemExit("the claims differ after the restart")
        lockstep(repo, "stop")
        proc.wait(60)
        print(f"\ngenerated {generated} events in {total_gen:.0f} s; ledger + WAL: at most {worst_after / 1e6:.0f} MB once the policy ran "
              f"(budget {policy.max_size / 1e6:g} MB), {worst_size / 1e6:.0f} MB right after a day was written in one go")
        print(f"restart after compaction: at most {max(restarts):.2f} s (target <= 5 s); starting Python and the CLI "
              f"(`lockstep --version`) just before took {min(floors):.2f}-{max(floors):.2f} s")
        print(f"intent p99 while the policy compacts: {d99:.2f} ms ({len(compacting)} intents in {args.probe_seconds:g} s at most) "
              f"vs {b99:.2f} ms idle before (baseline) = {d99 / b99:.2f} x (target <= 2); {a99:.2f} ms right after")
        print(f"p50 {pct(compacting, 0.5) * 1000:.2f} vs {pct(baseline, 0.5) * 1000:.2f} ms")
        met = d99 / b99 <= 2 and max(restarts) <= 5
        print(f"\ntargets {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
