#!/usr/bin/env python
"""The fresh-base gate at scale: index update cost and intent latency, each beside a
baseline from the same run.

    python bench/bench_fresh_base.py              # about a minute on 2 cores
    python bench/bench_fresh_base.py --files 2000 --samples 200   # a quick look

1. **Index update cost is the diff, not the history.**  A repository whose main has
   ``--history`` commits over ``--files`` files.  ``RefWatcher.sync`` (the coordinator's
   shell) reads it from scratch once (the baseline: what reading the history costs),
   then follows one new commit touching 1 file, and one touching every file.  Target:
   following a 1-file commit costs under 10 % of the from-scratch read.
2. **Intent latency with 10k files changed on main.**  Two real ``lockstep serve``, each
   on its own repository of ``--files`` files; in each an agent in a worktree asks
   ``intent`` (one-shot client, one connection, HEAD read from ``.git``'s files) for a
   file, then releases it (untimed).  Case A (the baseline): main changed nothing since
   the agent's base.  Case B: main changed every one of the files in one commit and the
   agent merged it (so its intents are allowed, and every one is judged against a
   10k-path index and a known lag).  The samples alternate A, B, B, A, ... so that load
   from elsewhere on the machine falls on both alike (measured one after the other, a
   busy spell during one case reads as that case's tail).
   Target (as bench_coordinator figure 4): p50 and p99 ratios B/A <= 1.5.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from coordinator.gitrefs import RefWatcher  # noqa: E402

perf = time.perf_counter


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write_all(root: Path, files: int, stamp: str) -> None:
    for i in range(files):
        path = root / "src" / f"d{i % 100:02d}" / f"f{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {stamp}\n")


def make_repo(base: Path, files: int, history: int) -> Path:
    main = base / "main"
    main.mkdir(parents=True)
    git(main, "init", "-q", "-b", "main")
    git(main, "config", "user.email", "bench@example.com")
    git(main, "config", "user.name", "bench")
    write_all(main, files, "init")
    git(main, "add", "-A")
    git(main, "commit", "-q", "-m", "init")
    # history: commits of a few files each, fast-imported (thousands of commits in a second)
    lines = []
    for n in range(history):
        lines += ["commit refs/heads/main", f"committer bench <bench@example.com> {1_700_000_000 + n} +0000",
                  f"data {len(f'c{n}')}", f"c{n}"]
        if n == 0:
            lines.append("from refs/heads/main^0")
        for k in range(3):
            i = (n * 7 + k * 131) % files
            body = f"# commit {n}\n"
            lines += [f"M 100644 inline src/d{i % 100:02d}/f{i:05d}.py", f"data {len(body)}", body.rstrip("\n")]
        lines.append("")
    if lines:
        subprocess.run(["git", "fast-import", "--quiet", "--force"], cwd=main, input="\n".join(lines) + "\n", text=True, check=True)
        git(main, "reset", "-q", "--hard", "main")
    return main


async def figure_index(main: Path, files: int) -> dict:
    watcher = RefWatcher(main / ".git")
    t = perf()
    await watcher.sync()
    scratch = perf() - t
    (main / "src" / "d00" / "f00000.py").write_text("# one\n")
    git(main, "commit", "-q", "-am", "one file")
    t = perf()
    await watcher.sync()
    one = perf() - t
    write_all(main, files, "every")
    git(main, "commit", "-q", "-am", "every file")
    t = perf()
    await watcher.sync()
    every = perf() - t
    t = perf()
    assert await watcher.sync() == []
    unchanged = perf() - t
    stats = watcher.index.statistics()
    return {"scratch": scratch, "one": one, "every": every, "unchanged": unchanged, "paths": stats.paths,
            "commits": stats.commits_read}


def intent_latencies(agent_trees: list[Path], samples: int, files: int) -> list[list[float]]:
    """Per tree, ``samples`` intent round trips, alternating between the trees."""
    from contextlib import ExitStack

    from agents.oneshot import open_oneshot

    out: list[list[float]] = [[] for _ in agent_trees]
    with ExitStack() as stack:
        sessions = [stack.enter_context(open_oneshot("bencher", cwd=tree, on_notice=lambda text: None)) for tree in agent_trees]
        for n in range(samples + 50):
            path = f"src/d{n % 100:02d}/f{(n * 37) % files:05d}.py"
            order = range(len(sessions)) if n % 2 == 0 else reversed(range(len(sessions)))
            for k in order:
                t = perf()
                decision = sessions[k].intent([path])
                elapsed = perf() - t
                if decision.verdict != "allow":
                    raise SystemExit(f"unexpected verdict: {decision.verdict}: {decision.reason}")
                sessions[k].release([path])
                if n >= 50:  # warm-up
                    out[k].append(elapsed)
    return out


def serve(main: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("LOCKSTEP_ENDPOINT", None)
    proc = subprocess.Popen([sys.executable, "-m", "agents.cli", "serve", "--heartbeat", "30", "--liveness", "100"],
                            cwd=main, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = main / ".git" / "lockstep" / "coordinator.json"
    deadline = time.monotonic() + 60
    while not state.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the coordinator did not start")
        time.sleep(0.05)
    return proc


def stop(main: Path, proc: subprocess.Popen) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "agents.cli", "stop"], cwd=main, env=env, capture_output=True, timeout=30)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=5_000, help="commits on main before the measurement")
    parser.add_argument("--samples", type=int, default=600)
    args = parser.parse_args()
    print(f"$ python bench/bench_fresh_base.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"files {args.files}, history {args.history} commits, samples {args.samples}; {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="lockstep-freshbase-") as tmp:
        base = Path(tmp)
        main_tree = make_repo(base / "index", args.files, args.history)
        fig = trio.run(figure_index, main_tree, args.files)
        ratio = fig["one"] / fig["scratch"]
        print("\n1. index update cost")
        print(f"   read from scratch ({fig['commits'] - 2} commits, {fig['paths']} paths): {fig['scratch'] * 1000:8.1f} ms  (baseline)")
        print(f"   follow a 1-file commit:                  {fig['one'] * 1000:8.1f} ms  = {ratio:.3f} x baseline (target < 0.1)")
        print(f"   follow a {args.files}-file commit:              {fig['every'] * 1000:8.1f} ms")
        print(f"   refs unchanged (stat only):              {fig['unchanged'] * 1e6:8.1f} us")

        trees = []
        for case in ("unchanged", "changed"):
            main_tree = make_repo(base / case, args.files, 0)
            agent = base / case / "agent"
            git(main_tree, "worktree", "add", "-q", "-b", "agent", str(agent))
            if case == "changed":
                write_all(main_tree, args.files, "changed on main")
                git(main_tree, "commit", "-q", "-am", "every file changed on main")
                git(agent, "merge", "-q", "main")
            trees.append((main_tree, agent))
        procs = []
        try:
            for main_tree, _ in trees:
                procs.append((main_tree, serve(main_tree)))
            a, b = intent_latencies([agent for _, agent in trees], args.samples, args.files)
        finally:
            for main_tree, proc in procs:
                stop(main_tree, proc)
        print(f"\n2. intent latency, {args.samples} samples each, alternating (allowed intents; each released untimed)")
        rows = []
        for label, q in (("p50", 0.5), ("p99", 0.99)):
            ra, rb = pct(a, q) * 1000, pct(b, q) * 1000
            rows.append((label, ra, rb, rb / ra))
            print(f"   {label}: main unchanged {ra:6.2f} ms (baseline), {args.files} files changed on main {rb:6.2f} ms "
                  f"= {rb / ra:.2f} x (target <= 1.5)")
        print(f"   mean: {statistics.mean(a) * 1000:.2f} ms vs {statistics.mean(b) * 1000:.2f} ms")
        met = ratio < 0.1 and all(r <= 1.5 for *_, r in rows)
        print(f"\ntargets {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
