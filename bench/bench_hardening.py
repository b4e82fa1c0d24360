#!/usr/bin/env python
"""Hardening figures: what hostile or greedy clients cost everyone else, and restart time.

    python bench/bench_hardening.py                  # all three: ~4 min on 2 cores
    python bench/bench_hardening.py --quick          # ~1.5 min smoke run
    python bench/bench_hardening.py --only memory    # F2 only (fairness, memory, restart)

Figures (each beside a baseline measured in the same run):

F1. fairness: a quiet client's serial claim+release round trip (p50, p99) with nothing
    else running, then while another client floods claims (pipelined, 1,000 in flight),
    then while another client floods ``status`` with 2,000 claims held.  Target: the
    loaded p50 at most 5x the unloaded p50.
F2. memory: the coordinator's RSS (psutil) idle, then with 100,000 claims held, then for
    ``--seconds`` (60) while a client sends ``status`` requests as fast as the socket
    takes them and never reads a reply, a subscriber never reads its publications, and a
    third client claims and releases serially (so there is something to publish).
    Target: bounded, at most 200 MB over the idle coordinator; the growth in the second
    half of the hostile phase shows whether it levelled off.
F3. restart: a ledger of 1,000,000 events with 10,000 live claims.  ~953,000 realistic
    events are inserted directly (100 agents over 7 days: a session per agent and day,
    tasks of an allowed intent, its auto-claim and release, one refused claim in ten;
    on the last day each agent keeps 100 claims); a coordinator starts on it (a full
    replay: the worst case, no snapshot), saves its start-up snapshot, and then its own
    clients write ~48,000 more events (claims and releases, below the 50,000 events
    between snapshots); it is killed (SIGKILL: no snapshot at stop).  Measured: from
    starting ``lockstep serve`` to the first answered request (a ``status`` sent on a
    socket connected before the start), snapshot + replay of the tail.  Target <= 5 s.

Every coordinator is a real ``lockstep serve`` subprocess in a throwaway git repository
(default durability: WAL, synchronous=NORMAL, i.e. it survives a killed process); load
generators are separate processes on the same cores, which the output says.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere; the coordinators it starts too:
os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
import zmq  # noqa: E402
from bench_coordinator import COORD_FLAGS, STARTUP_TIMEOUT, Client, Coordinator, pct  # noqa: E402

from ledger import Ledger  # noqa: E402
from ledger import records as rec  # noqa: E402
from protocol import messages as m  # noqa: E402
from protocol.codec import decode_reply, encode  # noqa: E402

perf = time.perf_counter


def _flood(endpoint: str, repo: str, kind: str, stop, started) -> None:
    """A greedy client: keeps ``window`` requests in flight until told to stop."""
    ctx = zmq.Context()
    client = Client(ctx, endpoint)
    session = client.hello(f"flood-{kind}", repo)
    window = 1000 if kind == "claim" else 50
    sock = client.sock
    sent = received = 0
    started.set()
    while not stop.is_set():
        while sent - received < window:
            sent += 1
            if kind == "claim":
                message = m.Claim(session=session, paths=[f"flood/{sent}.py"], req=sent)
            else:
                message = m.Status(req=sent)
            sock.send(encode(message))
        if sock.poll(100):
            sock.recv()
            received += 1
    client.request(m.Bye(session=session))  # its claims go: the next figure starts clean
    client.close()
    ctx.destroy(0)


def _serial_round_trips(client: Client, session: str, n: int) -> list[float]:
    samples = []
    for i in range(n):
        t0 = perf()
        granted = client.request(m.Claim(session=session, paths=[f"quiet/{i}.py"]))
        assert isinstance(granted, m.Granted), granted
        client.request(m.Release(session=session, paths=[f"quiet/{i}.py"]))
        samples.append(perf() - t0)
    return samples


def figure_fairness(n: int) -> dict:
    coord = Coordinator(COORD_FLAGS, "fair")
    ctx = zmq.Context()
    try:
        client = Client(ctx, coord.endpoint)
        session = client.hello("quiet", coord.repo)
        holder = client.hello("holder", coord.repo)
        client.request(m.Claim(session=holder, paths=[f"held/{i}.py" for i in range(2000)]))
        _serial_round_trips(client, session, 50)  # warm up
        results = {"unloaded": _serial_round_trips(client, session, n)}
        for kind in ("claim", "status"):
            stop, started = mp.Event(), mp.Event()
            proc = mp.Process(target=_flood, args=(coord.endpoint, coord.repo, kind, stop, started))
            proc.start()
            started.wait(30)
            time.sleep(0.5)  # let the flood reach its steady state
            results[f"{kind} flood"] = _serial_round_trips(client, session, n)
            stop.set()
            proc.join(30)
            if proc.is_alive():
                proc.kill()
        client.close()
    finally:
        ctx.destroy(0)
        coord.stop()
    base = pct(results["unloaded"], 50)
    rows = {}
    for label, samples in results.items():
        p50, p99 = pct(samples, 50), pct(samples, 99)
        rows[label] = {"p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3, "ratio_p50": p50 / base}
    return rows


def _rss(proc: psutil.Process) -> int:
    return proc.memory_info().rss


def _hold_claims(endpoint: str, repo: str, count: int, label: str, prefix: str, per_agent: int = 1000) -> None:
    """``count`` more live claims, ``per_agent`` per agent, each agent on its own DEALER."""
    ctx = zmq.Context()
    try:
        for a in range(count // per_agent):
            client = Client(ctx, endpoint)
            session = client.hello(f"holder-{label}-{a}", repo)
            paths = [f"{prefix}/pkg{a}/mod{i // 20}/file{i}.py" for i in range(per_agent)]
            assert isinstance(client.request(m.Claim(session=session, paths=paths)), m.Granted)
            client.close()  # the session lives on: its heartbeat interval is 30 s x 100
    finally:
        ctx.destroy(0)


def _hostile(coord: Coordinator, pub: str, proc: psutil.Process, seconds: float, ctx: zmq.Context) -> dict:
    """``seconds`` of a client that sends ``status`` requests as fast as its socket takes
    them and never reads, one that sends 1 MB frames as fast as its socket takes them
    (each refused ``too_large``: what costs is taking them in), a subscriber that never
    reads, and a client claiming and releasing serially (publications for the
    subscriber); RSS sampled every 0.5 s."""
    hog = ctx.socket(zmq.DEALER)
    hog.setsockopt(zmq.LINGER, 0)
    hog.setsockopt(zmq.RCVHWM, 1)
    hog.connect(coord.endpoint)
    big = ctx.socket(zmq.DEALER)
    big.setsockopt(zmq.LINGER, 0)
    big.connect(coord.endpoint)
    big_frame = encode(m.SendText(to="nobody", text="x" * (m.HARD_FRAME_LIMIT - 100)))
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVHWM, 1)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub)
    churn = Client(ctx, coord.endpoint)
    session = churn.hello(f"churn-{seconds}", coord.repo)
    samples: list[tuple[float, int]] = []
    statuses = cycles = frames = 0
    t0 = perf()
    next_sample = t0
    try:
        while (now := perf()) - t0 < seconds:
            for _ in range(50):
                if not hog.poll(0, zmq.POLLOUT):
                    break
                statuses += 1
                hog.send(encode(m.Status(req=statuses)), zmq.NOBLOCK)
            for _ in range(10):
                if not big.poll(0, zmq.POLLOUT):
                    break
                frames += 1
                big.send(big_frame, zmq.NOBLOCK)
            paths = [f"churn/{cycles % 100}/{i}.py" for i in range(20)]
            assert isinstance(churn.request(m.Claim(session=session, paths=paths)), m.Granted)
            churn.request(m.Release(session=session, paths=paths))
            cycles += 1
            if now >= next_sample:
                samples.append((now - t0, _rss(proc)))
                next_sample += 0.5
        samples.append((perf() - t0, _rss(proc)))
        replies = churn.request(m.Status(agent="nobody")).statistics["replies"]
    finally:
        churn.close()
        hog.close()
        big.close()
        sub.close()
    half = [rss for at, rss in samples if at >= seconds / 2]
    return {"max": max(rss for _, rss in samples), "end": samples[-1][1], "second_half_growth": max(half) - min(half),
            "statuses": statuses, "frames": frames, "cycles": cycles, "replies": replies, "samples": samples}


def figure_memory(seconds: float) -> dict:
    """Idle; 2,000 claims of long paths (a ``status`` lists ~0.5 MB) and the hostile
    clients for ``seconds``; 100,000 claims; the hostile clients again for half as long."""
    coord = Coordinator(COORD_FLAGS, "mem")
    ctx = zmq.Context()
    try:
        pub = json.loads((coord.dir / ".git" / "lockstep" / "coordinator.json").read_text())["pub"][0]
        proc = psutil.Process(coord.pid)
        time.sleep(1.0)  # start-up garbage settles
        rows = {"idle": _rss(proc)}
        _hold_claims(coord.endpoint, coord.repo, 2000, "long", "d" * 200)
        rows["claims_2k"] = _rss(proc)
        rows["hostile_2k"] = _hostile(coord, pub, proc, seconds, ctx)
        t = perf()
        _hold_claims(coord.endpoint, coord.repo, 98_000, "big", "big")
        rows["claims_s"] = perf() - t
        rows["claims_100k"] = _rss(proc)
        rows["hostile_100k"] = _hostile(coord, pub, proc, seconds / 2, ctx)
    finally:
        ctx.destroy(0)
        coord.stop()
    return rows


def _history(agents: int, live_per_agent: int, target: int, now: float):
    """(ts, record) in time order: ``agents`` agents over 7 days, about ``target`` events,
    ending with ``live_per_agent`` claims held by each agent's last session."""
    days = 7
    tasks = max(1, -(-(target - 2 * agents * days - agents * live_per_agent) * 10 // (31 * agents * days)))  # rounded up
    token, reserved, start = 1, 0, now - days * 86400
    yield start, rec.CoordinatorStarted(epoch=1, mode="parallel-strict")
    for day in range(days):
        for a in range(agents):
            name, session = f"agent{a:03d}", f"1.{day * agents + a + 1}"
            t = start + day * 86400 + a * 60
            yield t, rec.AgentJoined(agent=name, session=session, kind="session", worktree=f"/w/{name}", host="bench")
            for k in range(tasks):
                t += 86400 / tasks / 2 / agents
                path = f"src/m{a:03d}/f{k % 50:02d}.py"
                if token > reserved:
                    reserved = token + 999
                    yield t, rec.TokensReserved(upto=reserved)
                yield t, rec.IntentDecided(agent=name, session=session, token=token, verdict="allow", reason="allowed", paths=[path])
                yield t, rec.ClaimGranted(agent=name, session=session, token=token, patterns=[path], auto=True)
                if k % 10 == 0:
                    other = f"agent{(a + 1) % agents:03d}"
                    yield t, rec.ClaimRefused(agent=other, patterns=[path], reason=f"held by {name}")
                yield t + 1, rec.ClaimReleased(agent=name, session=session, token=token, patterns=[path], reason="released by holder")
                token += 1
            if day < days - 1:
                yield t + 2, rec.AgentLeft(agent=name, session=session, reason="bye")
                continue
            for k in range(live_per_agent):  # the last day: claims still held at the end
                if token > reserved:
                    reserved = token + 999
                    yield t, rec.TokensReserved(upto=reserved)
                yield t + 3, rec.ClaimGranted(agent=name, session=session, token=token, patterns=[f"live/a{a:03d}/f{k:03d}.py"])
                token += 1


def _write_ledger(path: Path, events, chunk: int = 100_000) -> int:
    with Ledger.open(path):
        pass  # the schema
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # generation only: the coordinator opens it as always
    n, rows = 0, []

    def flush() -> None:
        with conn:
            conn.executemany("INSERT INTO events (id, ts, epoch, kind, agent, session, token, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        rows.clear()

    for ts, record in events:
        n += 1
        rows.append((n, ts, 1, record.KIND, record.agent, record.session, record.token, rec.encode_data(record).decode()))
        if len(rows) >= chunk:
            flush()
    flush()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return n


def _events_in(ledger: Path) -> int:
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        return conn.execute("select count(*) from events").fetchone()[0]
    finally:
        conn.close()


def _serve(coord: Coordinator) -> tuple[subprocess.Popen, float, float]:
    """Start ``lockstep serve`` again in ``coord``'s repository; seconds until a ``status``
    sent on a socket connected before the start is answered, and the CPU seconds the
    coordinator used until then (on a busy machine the wall time is mostly waiting)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 5)  # retry the connection every 5 ms until it is bound
    sock.connect(coord.endpoint)  # ipc: the same path as before; zmq connects once it is bound
    sock.send(encode(m.Status(req=1, agent="nobody")))
    t0 = perf()
    proc = subprocess.Popen([sys.executable, "-m", "agents.cli", "serve", *COORD_FLAGS], cwd=coord.dir, env=coord.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = t0 + 10 * STARTUP_TIMEOUT
        while not sock.poll(50):
            if proc.poll() is not None or perf() > deadline:
                raise RuntimeError(f"the coordinator did not answer (exit code {proc.poll()})")
        elapsed = perf() - t0
        cpu = psutil.Process(proc.pid).cpu_times()
        assert isinstance(decode_reply(sock.recv()), m.StatusReply)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        sock.close()
        ctx.destroy(0)
    return proc, elapsed, cpu.user + cpu.system


def _claims_and_releases(endpoint: str, repo: str, pairs: int, agents: int = 50) -> None:
    """Real traffic through the coordinator: ``pairs`` claims and their releases."""
    ctx = zmq.Context()
    try:
        clients = [Client(ctx, endpoint) for _ in range(agents)]
        sessions = [c.hello(f"tail-{i}", repo) for i, c in enumerate(clients)]
        per = pairs // agents
        for k in range(0, per, 50):
            for i, (client, session) in enumerate(zip(clients, sessions)):
                paths = [[f"tail/a{i}/f{j}.py"] for j in range(k, min(per, k + 50))]
                client.pipeline([m.Claim(session=session, paths=p) for p in paths], window=16)
                client.pipeline([m.Release(session=session, paths=p) for p in paths], window=16)
        for c in clients:
            c.close()
    finally:
        ctx.destroy(0)


def figure_restart(total: int, live: int) -> dict:
    agents = 100
    tail_pairs = 24_000  # ~48,000 events written by the coordinator: under its 50,000 between snapshots
    coord = Coordinator(COORD_FLAGS, "restart")  # the repository and state directory; this first one only sets up
    coord_pid = coord.pid
    coord.proc.send_signal(signal.SIGTERM)
    coord.proc.wait(30)
    ledger = coord.dir / ".git" / "lockstep" / "ledger.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    rows: dict = {}
    proc = None
    try:
        t = perf()
        rows["generated"] = _write_ledger(ledger, _history(agents, live // agents, total - 47_500, time.time()))
        rows["generate_s"] = perf() - t
        rows["db_mb"] = ledger.stat().st_size / 1e6
        proc, rows["full_replay_s"], rows["full_replay_cpu"] = _serve(coord)  # no snapshot: every event replayed
        coord.proc = proc
        _claims_and_releases(coord.endpoint, coord.repo, tail_pairs)
        client_ctx = zmq.Context()
        client = Client(client_ctx, coord.endpoint)
        before = client.request(m.Status(agent="nobody")).statistics["registry"]
        client.close()
        client_ctx.destroy(0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
        rows["snapshot_upto"] = conn.execute("select max(upto) from snapshots").fetchone()[0]
        conn.close()
        rows["events"] = _events_in(ledger)
        proc, rows["restart_s"], rows["restart_cpu"] = _serve(coord)
        coord.proc = proc
        client_ctx = zmq.Context()
        client = Client(client_ctx, coord.endpoint)
        after = client.request(m.Status(agent="nobody")).statistics["registry"]
        client.close()
        client_ctx.destroy(0)
        rows["claims_before"], rows["claims_after"] = before.get("claims"), after.get("claims")
    finally:
        coord.pid = proc.pid if proc is not None else coord_pid
        coord.stop()
    return rows


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples, shorter phases")
    parser.add_argument("--only", default="fairness,memory,restart", help="comma-separated: fairness, memory, restart")
    parser.add_argument("--seconds", type=float, default=None, help="F2's hostile phase (default 60, 15 with --quick)")
    args = parser.parse_args()
    only = {x.strip() for x in args.only.split(",")}
    print(f"$ python bench/bench_hardening.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores shared with the load generators); "
          f"coordinators: `lockstep serve {' '.join(COORD_FLAGS)}` (fsync process-crash, the default)")
    if "fairness" in only:
        rows = figure_fairness(100 if args.quick else 400)
        print("\nF1 fairness: a quiet client's serial claim+release round trip (2,000 claims held)")
        print(f"{'load':<16}{'p50 ms':>10}{'p99 ms':>10}{'p50 / unloaded':>16}")
        for label, row in rows.items():
            print(f"{label:<16}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}{row['ratio_p50']:>16.2f}")
        worst = max(row["ratio_p50"] for row in rows.values())
        print(f"target: loaded p50 <= 5x unloaded; worst {worst:.2f}x: {'met' if worst <= 5 else 'NOT met'}")
    if "memory" in only:
        seconds = args.seconds or (15.0 if args.quick else 60.0)
        r = figure_memory(seconds)
        idle = r["idle"]
        print(f"\nF2 memory: coordinator RSS (idle {_mb(idle)}) with a never-reading client, a client sending 1 MB frames, "
              f"a never-reading subscriber and a serial claim+release client")
        worst = 0
        for label, held, hostile, secs in (("2,000 claims (long paths)", r["claims_2k"], r["hostile_2k"], seconds),
                                           ("100,000 claims", r["claims_100k"], r["hostile_100k"], seconds / 2)):
            worst = max(worst, hostile["max"] - idle, held - idle)
            rep = hostile["replies"]
            print(f"    {label}: held {_mb(held)} (+{_mb(held - idle)} over idle); {secs:g} s hostile "
                  f"({hostile['statuses']:,} status requests and {hostile['frames']:,} 1 MB frames sent, "
                  f"{hostile['cycles']:,} claim+release cycles): "
                  f"max {_mb(hostile['max'])} (+{_mb(hostile['max'] - idle)} over idle), end {_mb(hostile['end'])}, "
                  f"growth within the second half {_mb(hostile['second_half_growth'])}; cut-offs {rep['cut_offs']}, "
                  f"replies dropped {rep['replies_dropped']:,} ({_mb(rep['bytes_dropped'])})")
            step = max(1, len(hostile["samples"]) // 12)
            print("      RSS (s: MiB) " + ", ".join(f"{at:.0f}: {rss / 2**20:.0f}" for at, rss in hostile["samples"][::step]))
        print(f"    (100,000 claims taken in {r['claims_s']:.1f} s)")
        print(f"target: at most 200 MB over the idle coordinator; worst {worst / 1e6:.0f} MB: {'met' if worst <= 200e6 else 'NOT met'}")
    if "restart" in only:
        total = 1_000_000
        r = figure_restart(total, 10_000)
        print(f"\nF3 restart on a ledger of {r['events']:,} events ({r['generated']:,} generated in {r['generate_s']:.1f} s, "
              f"{r['db_mb']:.0f} MB; the rest written by the coordinator), live claims {r['claims_before']:,} before the kill, "
              f"{r['claims_after']:,} after the restart")
        print(f"    first start, no snapshot (replays all {r['generated']:,}): first answer after {r['full_replay_s']:.2f} s "
              f"(coordinator CPU {r['full_replay_cpu']:.2f} s)")
        print(f"    restart after SIGKILL (snapshot at event {r['snapshot_upto']:,} + the {r['events'] - r['snapshot_upto']:,} "
              f"after it): first answer after {r['restart_s']:.2f} s (coordinator CPU {r['restart_cpu']:.2f} s)")
        print(f"target: restart <= 5 s: {'met' if r['restart_s'] <= 5 else 'NOT met'} "
              f"(load average {os.getloadavg()[0]:.2f}: with other work on the cores, wall time exceeds CPU time)")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
