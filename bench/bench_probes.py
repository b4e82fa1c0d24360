"""Benchmark of the probe pool: ``python bench/bench_probes.py`` (about 10-15 s).

Prints, from one run:

1. Dispatch overhead of a cheap probe (``write`` of a 1 KiB file) through a warm
   ``ProbePool`` (trio-parallel worker) against a fresh ``python -m probes.worker``
   process per probe, median and p99 (nearest rank), and the ratio of the medians.
   Also a ``command`` probe of ``true`` through the pool against a bare
   ``trio.run_process(["true"])``, and the cost of a worker's first call (spawn).
2. Suite wall time against the sum of its checks for 4 commands sleeping
   0.3/0.5/0.8/1.0 s, with ``limit=4`` (target: wall close to the slowest check) and
   with the default limit (one slot per CPU), printed as ratios.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from probes.model import ProbeSpec  # noqa: E402
from probes.pool import open_probe_pool  # noqa: E402

POOL_RUNS = 300
FRESH_RUNS = 40
SLEEPS = (0.3, 0.5, 0.8, 1.0)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summary(label: str, samples: list[float]) -> float:
    median = statistics.median(samples)
    print(f"  {label:<44} median {median * 1e3:8.3f} ms   p99 {percentile(samples, 0.99) * 1e3:8.3f} ms   (n={len(samples)})")
    return median


async def time_call(fn, *args) -> float:
    started = time.perf_counter()
    await fn(*args)
    return time.perf_counter() - started


async def bench_dispatch(workdir: Path) -> None:
    payload = os.urandom(1024)
    (workdir / "artifact.bin").write_bytes(payload)
    write_spec = ProbeSpec(
        name="bench-write",
        kind="write",
        params={"path": "artifact.bin", "sha256": hashlib.sha256(payload).hexdigest()},
        cwd=str(workdir),
    )
    true_spec = ProbeSpec(name="bench-true", kind="command", params={"argv": ["true"]}, cwd=str(workdir))
    print("dispatch overhead (one probe at a time)")
    async with open_probe_pool(limit=2) as pool:
        first = await time_call(pool.run, write_spec)
        print(f"  {'pool, first call (spawns a worker)':<44} {first * 1e3:8.1f} ms")
        for _ in range(20):  # settle caches
            await pool.run(write_spec)
        pooled = [await time_call(pool.run, write_spec) for _ in range(POOL_RUNS)]
        assert (await pool.run(write_spec)).passed
        pool_median = summary("write probe via warm pool", pooled)
        command_times = [await time_call(pool.run, true_spec) for _ in range(100)]
        summary("command probe `true` via pool", command_times)
    bare = [await time_call(trio.run_process, ["true"]) for _ in range(100)]
    summary("bare trio.run_process(['true'])", bare)

    spec_json = msgspec.json.encode(write_spec)
    fresh = []
    for _ in range(FRESH_RUNS):
        started = time.perf_counter()
        done = await trio.run_process(
            [sys.executable, "-m", "probes.worker"], stdin=spec_json, capture_stdout=True
        )
        fresh.append(time.perf_counter() - started)
        assert b'"verdict":"pass"' in done.stdout, done.stdout
    fresh_median = summary("write probe via fresh python -m probes.worker", fresh)
    print(f"  fresh process / pool (medians): {fresh_median / pool_median:.0f}x")


def sleep_spec(seconds: float) -> ProbeSpec:
    return ProbeSpec(
        name=f"sleep-{seconds}",
        kind="command",
        params={"argv": [sys.executable, "-c", f"import time; time.sleep({seconds})"]},
    )


async def bench_suite() -> None:
    specs = [sleep_spec(seconds) for seconds in SLEEPS]
    print(f"suite of {len(specs)} commands sleeping {', '.join(map(str, SLEEPS))} s")
    for limit in (len(specs), os.cpu_count() or 1):
        async with open_probe_pool(limit=limit) as pool:
            started = time.perf_counter()
            results = await pool.run_suite(specs)
            wall = time.perf_counter() - started
        assert all(result.passed for result in results), results
        checks = [result.duration for result in results]
        slowest, total = max(checks), sum(checks)
        print(
            f"  limit={limit}: wall {wall:.3f} s, slowest check {slowest:.3f} s, sum of checks {total:.3f} s;"
            f" wall/slowest {wall / slowest:.2f}x, wall/sum {wall / total:.2f}x,"
            f" wall/nominal slowest ({max(SLEEPS)} s) {wall / max(SLEEPS):.2f}x"
        )


async def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, trio {trio.__version__}")
    with tempfile.TemporaryDirectory(prefix="bench-probes-") as workdir:
        await bench_dispatch(Path(workdir))
    await bench_suite()


if __name__ == "__main__":  # required: trio-parallel spawns workers that import __main__
    trio.run(main)
