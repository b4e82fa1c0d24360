"""The probe kinds: one module per kind, each declaring itself once as ``KIND``.

A kind module holds everything about one kind of check: its params Struct (the wire
schema, and through ``probes.schema.in_toml`` the schema of its ``[[probe]]`` table),
the checks msgspec cannot express (``check``), the check itself (``run``) and what a
result names as checked (``target``).  Adding a kind is one new module here (and its
name in ``probes.model.KINDS``, the wire vocabulary, and the docs); ``kinds()`` finds it.

Where each kind runs (see ``probes.pool``): a kind ``on_loop`` (``command``) is an async
function driving a child process from the coordinator's trio loop; every other kind is
a plain synchronous function run in a worker process.  Relative paths in params resolve
against ``spec.cwd`` (the agent's worktree), never against the worker's own working
directory, because workers are shared by agents.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from probes.model import KINDS as KIND_NAMES


class Kind(NamedTuple):
    name: str
    params: type  # its params Struct (msgspec, unknown fields forbidden)
    check: Callable[[str, Any], None]  # (label, params): raise ProbeError for what msgspec cannot say
    run: Callable[..., Any]  # (spec, params) -> ProbeResult; a coroutine function when on_loop
    target: Callable[[Any, Any], str]  # (spec, params) -> the path, command line, URL or pattern checked
    on_loop: bool = False  # True: runs on the trio loop (drives a child process); else in a worker
    # (TOML params as written) -> why a [[probe]] table of this kind is wrong, or None:
    # for rules across keys that one field's type cannot state.
    table_problem: Callable[[dict[str, Any]], str | None] | None = None
    # (label, spec, params): raise ProbeError for a target the spec may not name where it
    # runs (``spec.cwd`` is set): a write check's file outside the worktree.
    check_target: Callable[[str, Any, Any], None] | None = None


_FOUND: dict[str, Kind] = {}


def kinds() -> dict[str, Kind]:
    """Every kind by name, in ``probes.model.KINDS`` order (others after, by name).

    The kind modules are imported on first use, not with this package: loading
    ``lockstep.toml`` needs only their params, and the client's verbs none of it."""
    if not _FOUND:
        import importlib
        import pkgutil

        found: dict[str, Kind] = {}
        for module_info in pkgutil.iter_modules(__path__):
            module = importlib.import_module(f"{__name__}.{module_info.name}")
            kind = getattr(module, "KIND", None)
            if isinstance(kind, Kind):
                found[kind.name] = kind
        rank = {name: index for index, name in enumerate(KIND_NAMES)}
        _FOUND.update(sorted(found.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))
    return _FOUND
