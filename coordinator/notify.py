"""Operator notices beyond the ledger: a desktop notification and a webhook.

Every operator ``notice`` (a ``notify`` response, a "resolved", a restart with no
command configured) is a ledger event and a publication (``top`` shows it); with
``[notify]`` in lockstep.toml it also goes to ``notify-send`` (``desktop = true``, when
the command is installed) and is POSTed as JSON to ``webhook``.  Each delivery is
bounded (``DELIVERY_TIMEOUT``) and best effort: a failure is logged, never retried,
and never holds up the coordinator.  Notices are deduplicated where they are made
(probes/rules.py: once per change of a finding's state), so nothing is repeated here.
"""

from __future__ import annotations

import json
import logging
import shutil
import urllib.error
import urllib.request
from typing import Any

import trio

from probes.config import NotifyTable

log = logging.getLogger("lockstep")

DELIVERY_TIMEOUT = 5.0  # seconds per channel


async def deliver(settings: NotifyTable, message: str, data: dict[str, Any]) -> list[str]:
    """Send ``message`` where ``settings`` say; what happened on each channel."""
    done = []
    if settings.desktop:
        done.append(await _desktop(message))
    if settings.webhook:
        done.append(await _webhook(settings.webhook, {"message": message, **data}))
    return done


async def _desktop(message: str) -> str:
    command = shutil.which("notify-send")
    if command is None:
        return "desktop: notify-send is not installed"
    with trio.move_on_after(DELIVERY_TIMEOUT):
        try:
            done = await trio.run_process([command, "--app-name=lockstep", "lockstep", message], check=False, capture_stdout=True, capture_stderr=True)
        except OSError as exc:
            log.warning("notify-send failed: %s", exc)
            return f"desktop: {exc}"
        return f"desktop: notify-send exit {done.returncode}"
    return "desktop: notify-send timed out"


async def _webhook(url: str, payload: dict[str, Any]) -> str:
    body = json.dumps(payload).encode()

    def post() -> str:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", "User-Agent": "lockstep"})
        try:
            with urllib.request.urlopen(request, timeout=DELIVERY_TIMEOUT) as answer:  # noqa: S310 - the user's own URL
                return f"webhook: {answer.status}"
        except urllib.error.HTTPError as exc:
            return f"webhook: {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            log.warning("webhook %s failed: %s", url, exc)
            return f"webhook: {exc}"

    return await trio.to_thread.run_sync(post, abandon_on_cancel=True)
