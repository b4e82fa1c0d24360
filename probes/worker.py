"""Run one probe in a fresh process: ``python -m probes.worker < spec.json``.

Reads one JSON ``ProbeSpec`` on stdin, writes one JSON ``ProbeResult`` on stdout and
exits 0; a malformed spec is exit status 2 with the reason on stderr.  The pool does
not use this (a warm trio-parallel worker dispatches ~350x faster, see
``probes.pool``); it is the baseline ``bench/bench_probes.py`` measures against, and a
way to run a probe by hand.  The spec's timeout is the caller's to enforce here, by
killing this process, except for ``command`` probes, which enforce their own.
"""

from __future__ import annotations

import sys

import trio

from probes import builtin
from probes.model import ProbeError, decode_spec, encode_result


def main() -> int:
    try:
        spec, params = builtin.prepare(decode_spec(sys.stdin.buffer.read()))
    except ProbeError as exc:
        print(f"probes.worker: {exc.message}", file=sys.stderr)
        return 2
    kind = builtin.kind_of(spec)
    if kind.on_loop:
        result = trio.run(kind.run, spec, params)
    else:
        result = builtin.run_python_probe(builtin.PYTHON_PROBES[spec.kind], spec, params)
    sys.stdout.buffer.write(encode_result(result) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
