"""JSON from outside the process (hook events, MCP lines, a user's settings file, a
package manifest, a command-line value): decoded so that bad input raises ``ValueError``
and nothing else.

``json.loads`` raises ``RecursionError`` on deeply nested input (``[[[[...`` a few
thousand deep, a few KB), which callers catching ``ValueError`` let through as a
traceback.  Nesting is bounded by the interpreter's stack, so the error is caught, not
pre-checked: the stack is unwound by then and nothing is left half-done.
"""

from __future__ import annotations

import json
from typing import Any


def loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads(text, **options)``; ``ValueError`` for anything that is not JSON."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("nested too deeply") from None
