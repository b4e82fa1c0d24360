"""A scriptable agent process for integration tests.

    python -m tests.agent_proc NAME [--kind session|run|oneshot]

Opens a session with the client library (heartbeating in the background), prints
``{"event": "ready", "session": ...}``, then reads one JSON command per line on stdin
(``{"op": "claim", "paths": [...]}``, ``intent``, ``release``, ``status``, ``exit``) and
prints one JSON result per line.  Notices from the client (e.g. "session expired")
are printed as ``{"event": "notice", "text": ...}``.
"""

from __future__ import annotations

import json
import sys

import msgspec
import trio

from agents.client import RequestFailed, open_agent


def emit(payload: dict) -> None:
    print(json.dumps(payload), flush=True)


async def main(name: str, kind: str = "session") -> None:
    notices = lambda text: emit({"event": "notice", "text": text})  # noqa: E731
    async with open_agent(name, kind=kind, on_notice=notices) as agent:
        emit({"event": "ready", "session": agent.session})
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            op = command.pop("op")
            if op == "exit":
                emit({"event": "bye"})
                return
            try:
                if op == "claim":
                    reply = await agent.claim(command["paths"], shared=command.get("shared", False))
                elif op == "intent":
                    reply = await agent.intent(command["paths"], token=command.get("token"))
                elif op == "release":
                    reply = await agent.release(command.get("paths", []), all=command.get("all", False))
                elif op == "status":
                    reply = await agent.status()
                else:
                    emit({"error": f"unknown op {op}"})
                    continue
                emit({"session": agent.session, **msgspec.to_builtins(reply)})
            except RequestFailed as exc:
                emit({"error": exc.code, "message": exc.message})


if __name__ == "__main__":
    kind = sys.argv[sys.argv.index("--kind") + 1] if "--kind" in sys.argv else "session"
    trio.run(main, sys.argv[1], kind)
