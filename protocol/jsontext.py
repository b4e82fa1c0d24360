"""JSON from outside the process (hook events, MCP lines, a user's settings file, a
package manifest, a command-line value): decoded so that bad input raises ``ValueError``
and nothing else.

``json.loads`` raises ``RecursionError`` on deeply nested input (``[[[[...`` a few
thousand deep, a few KB), which callers catching ``ValueError`` let through as a
traceback.  Nesting is bounded by the interpreter's stack, so the error is caught, not
pre-checked: the stack is unwound by then and nothing is left half-done.  A number of
more than 4300 digits is Python's limit too: said as such, not as advice to call
``sys.set_int_max_str_digits()``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def loads(text: str | bytes, **options: Any) -> Any:
    """``json.loads(text, **options)``; ``ValueError`` for anything that is not JSON."""
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise
        # Python's own limit, whose message tells the sender to call sys.set_int_max_str_digits()
        raise ValueError(f"a number of more than {sys.get_int_max_str_digits()} digits") from None
