#!/usr/bin/env python
"""Hardening figures: what one hostile or greedy client costs everyone else.

    python bench/bench_hardening.py            # ~1 min
    python bench/bench_hardening.py --quick    # ~20 s smoke run

Figures (each a ratio to a baseline measured in the same run):

F1. fairness: a quiet client's serial claim+release round trip (p50, p99) with nothing
    else running, then while another client floods claims (pipelined, 1,000 in flight),
    then while another client floods ``status`` with 2,000 claims held.  Target: the
    loaded p50 at most 5x the unloaded p50.

Every coordinator is a real ``lockstep serve`` subprocess in a throwaway git repository
(default durability: WAL, synchronous=NORMAL, i.e. it survives a killed process); load
generators are separate processes on the same cores, which the output says.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere; the coordinators it starts too:
os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import zmq  # noqa: E402
from bench_coordinator import COORD_FLAGS, Client, Coordinator, pct  # noqa: E402

from protocol import messages as m  # noqa: E402
from protocol.codec import encode  # noqa: E402

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
    ctx.term()


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
        ctx.term()
        coord.stop()
    base = pct(results["unloaded"], 50)
    rows = {}
    for label, samples in results.items():
        p50, p99 = pct(samples, 50), pct(samples, 99)
        rows[label] = {"p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3, "ratio_p50": p50 / base}
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    n = 100 if args.quick else 400
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores shared with the load generators)")
    rows = figure_fairness(n)
    print("\nF1 fairness: a quiet client's serial claim+release round trip (2,000 claims held)")
    print(f"{'load':<16}{'p50 ms':>10}{'p99 ms':>10}{'p50 / unloaded':>16}")
    for label, row in rows.items():
        print(f"{label:<16}{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}{row['ratio_p50']:>16.2f}")
    worst = max(row["ratio_p50"] for row in rows.values())
    print(f"\ntarget: loaded p50 <= 5x unloaded; worst {worst:.2f}x: {'met' if worst <= 5 else 'NOT met'}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
