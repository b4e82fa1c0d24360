#!/usr/bin/env python
"""Heartbeats both ways: what the coordinator's answers cost, and how soon an agent learns
the coordinator is gone.

    python bench/bench_heartbeats.py            # ~1.5 min
    python bench/bench_heartbeats.py --quick    # ~40 s smoke run

Figures (each a ratio to a baseline measured in the same run):

H1. cost of answering: a coordinator's CPU (% of one core) while 1,000 sessions heartbeat
    at 1 Hz asking for an answer (``echo``, what the client library sends), ratio to the
    same sessions heartbeating one-way.  Alternating phases, median of 3.  Target: <= 2x.
H2. detection: ``lockstep run`` under a coordinator with heartbeat 0.2 s x liveness 5
    (1 s); the coordinator gets SIGKILL; time until ``run`` prints "coordinator
    unreachable" on stderr, ratio to heartbeat x liveness.  Then the coordinator is
    started again: time until ``run`` prints "coordinator reachable again" (its session
    and pid watch registered again).  5 rounds (3 with --quick).  Target: detection <=
    1.2x heartbeat x liveness (the last answer heard is at most one heartbeat old).

Every coordinator is a real ``lockstep serve`` subprocess in a throwaway git repository;
the heartbeating sockets live in this process, on the same 2 cores.
"""

from __future__ import annotations

import argparse
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere; the coordinators it starts too:
os.environ["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import zmq  # noqa: E402
from bench_coordinator import COORD_FLAGS, Client, Coordinator, CpuMeter, median  # noqa: E402

from protocol import messages as m  # noqa: E402
from protocol.codec import encode  # noqa: E402

perf = time.perf_counter


def say(text: str = "") -> None:
    print(text, flush=True)


# ---------------------------------------------------------------- H1


def _beat(socks: list, frames: list[bytes], seconds: float, rate: float, drain: bool) -> int:
    """Each socket sends one frame per ``1/rate`` s, spread evenly; returns answers read."""
    k = len(socks)
    period = 1.0 / (rate * k)
    t0 = perf()
    n = answered = 0
    while perf() - t0 < seconds:
        due = int((perf() - t0) / period) + 1
        while n < due:
            socks[n % k].send(frames[n % k])
            n += 1
        if drain:
            for s in socks:
                try:
                    while True:
                        s.recv(zmq.NOBLOCK)
                        answered += 1
                except zmq.Again:
                    pass
        time.sleep(0.005)
    return answered


def figure_answer_cost(sessions: int, seconds: float, rounds: int) -> dict:
    coord = Coordinator(COORD_FLAGS, "hb")
    ctx = zmq.Context()
    ctx.setsockopt(zmq.MAX_SOCKETS, sessions + 64)
    socks = []
    try:
        ids = []
        for i in range(sessions):
            client = Client(ctx, coord.endpoint)
            ids.append(client.hello(f"hb-{i}", coord.repo))
            socks.append(client)
        raw = [c.sock for c in socks]
        one_way = [encode(m.Heartbeat(session=s)) for s in ids]
        echoed = [encode(m.Heartbeat(session=s, echo=True)) for s in ids]
        _beat(raw, one_way, 2.0, 1.0, drain=True)  # warm up
        cpu = {"one-way": [], "echo": []}
        answers = 0
        for _ in range(rounds):
            for label, frames in (("one-way", one_way), ("echo", echoed)):
                meter = CpuMeter([coord.pid]).start()
                got = _beat(raw, frames, seconds, 1.0, drain=True)
                cpu[label].append(meter.stop())
                if label == "echo":
                    answers += got
        return {
            "one_way": median(cpu["one-way"]),
            "echo": median(cpu["echo"]),
            "runs": cpu,
            "answers": answers,
        }
    finally:
        for c in socks:
            c.sock.close(linger=0)
        ctx.term()
        coord.stop()


# ---------------------------------------------------------------- H2


class RunWatch:
    """``lockstep run --agent NAME -- sleep``; its stderr lines, timestamped."""

    def __init__(self, coord: Coordinator) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", "run", "--agent", "watched", "--", "sleep", "3600"],
            cwd=coord.dir,
            env=coord.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.put((perf(), line.strip()))

    def wait_for(self, text: str, timeout: float = 30.0) -> float:
        deadline = perf() + timeout
        while True:
            try:
                at, line = self.lines.get(timeout=max(0.01, deadline - perf()))
            except queue.Empty:
                raise RuntimeError(f"run did not say {text!r} within {timeout}s") from None
            if text in line:
                return at

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _restart(coord: Coordinator, flags: list[str]) -> None:
    """Start ``lockstep serve`` again in the same repository (after a SIGKILL)."""
    state = coord.dir / ".git" / "lockstep" / "coordinator.json"
    coord.proc = subprocess.Popen(
        [sys.executable, "-m", "agents.cli", "serve", *flags],
        cwd=coord.dir, env=coord.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    import json

    deadline = perf() + 30
    while perf() < deadline:
        try:
            if json.loads(state.read_text()).get("pid") == coord.proc.pid:
                coord.pid = coord.proc.pid
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise RuntimeError("the coordinator did not come back within 30 s")


def _wait_watched(coord: Coordinator, timeout: float = 30.0) -> None:
    """Until ``run``'s session is live with its command's pid watched."""
    ctx = zmq.Context()
    client = Client(ctx, coord.endpoint)
    try:
        deadline = perf() + timeout
        while perf() < deadline:
            agents = client.request(m.Status()).agents
            if any(a.name == "watched" and a.state == "alive" and a.pid for a in agents):
                return
            time.sleep(0.05)
        raise RuntimeError(f"run's session was not live within {timeout}s")
    finally:
        client.sock.close(linger=0)
        ctx.term()


def figure_detection(rounds: int) -> dict:
    heartbeat, liveness = 0.2, 5
    flags = ["--heartbeat", str(heartbeat), "--liveness", str(liveness)]
    coord = Coordinator(flags, "detect")
    run = RunWatch(coord)
    detect, back = [], []
    try:
        _wait_watched(coord)
        for _ in range(rounds):
            coord.proc.kill()
            killed = perf()
            coord.proc.wait()
            detect.append(run.wait_for("coordinator unreachable") - killed)
            _restart(coord, flags)
            served = perf()
            back.append(run.wait_for("coordinator reachable again") - served)
        return {"limit": heartbeat * liveness, "detect": detect, "back": back}
    finally:
        run.stop()
        coord.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter phases, fewer rounds")
    args = parser.parse_args()
    say(f"$ python bench/bench_heartbeats.py{' --quick' if args.quick else ''}")
    say(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")

    seconds, rounds = (4.0, 3) if args.quick else (10.0, 3)
    h1 = figure_answer_cost(1000, seconds, rounds)
    ratio1 = h1["echo"] / max(h1["one_way"], 1e-9)
    say(f"\nH1 1,000 sessions x 1 Hz, {seconds:g} s phases: coordinator CPU one-way {[round(x, 1) for x in h1['runs']['one-way']]}, echo {[round(x, 1) for x in h1['runs']['echo']]} (% of a core); {h1['answers']} answers read")

    h2 = figure_detection(3 if args.quick else 5)
    detect_ratio = max(h2["detect"]) / h2["limit"]
    say(f"H2 heartbeat x liveness = {h2['limit']:g} s: detection {[round(x, 2) for x in h2['detect']]} s; back after restart {[round(x, 2) for x in h2['back']]} s")

    say("\n| figure | measured | baseline | ratio | target | met |")
    say("|---|---|---|---|---|---|")
    say(f"| H1 coordinator CPU, 1,000 sessions heartbeating at 1 Hz with answers | {h1['echo']:.1f} % | one-way {h1['one_way']:.1f} % | {ratio1:.2f}x | <= 2x | {'yes' if ratio1 <= 2 else 'no'} |")
    say(f"| H2 coordinator SIGKILL -> run says unreachable (worst of {len(h2['detect'])}) | {max(h2['detect']):.2f} s | heartbeat x liveness {h2['limit']:g} s | {detect_ratio:.2f}x | <= 1.2x | {'yes' if detect_ratio <= 1.2 else 'no'} |")
    say(f"| H2 coordinator serving again -> run registered again (median) | {median(h2['back']):.2f} s | heartbeat {0.2:g} s | {median(h2['back']) / 0.2:.1f}x | - | - |")
    say(f"\nload average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
