"""Decode a TOML file into its schema Struct; say what is wrong in the file's own terms.

``decode(text, schema, source)`` is ``msgspec.toml.decode`` with ``probes.schema``'s
``dec_hook``.  msgspec stops at the first problem and names it by a path
(``Expected `int` >= 1 - at `$.coordinator.liveness```); ``ConfigError`` must instead
name the file, the table and the key as a person wrote them, and suggest the key they
probably meant::

    lockstep.toml: [coordinator] key 'liveness': 0 is less than the minimum 1
    lockstep.toml: [[rule]] #2: unknown key 'respone' (did you mean 'response'?); known keys: ...

So on failure (only then) the document is read again with ``tomllib`` and the path is
walked through the schema (``msgspec.inspect``) and the raw values, to find the table's
label, the key, the value and the type that was expected.  Labels: a top-level table
``[name]``, a table of tables ``[name.KEY]``, an array of tables ``[[name]] #N``
(1-based), an inline table in an array ``... key 'pre' item N``.

A schema Struct may set two class attributes used only in messages: ``hint`` (appended
to an unknown-key message) and ``missing`` (key -> the sentence to say when that
required key is absent).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from probes.schema import dec_hook, describe, shown
from protocol.errors import UsageError


class ConfigError(UsageError):
    """The user's configuration (``lockstep.toml``, ``PLAN.toml``) is invalid.

    A ``UsageError`` (exit 2; code ``bad_request`` in ``--json`` output): our user's
    input is at fault, not Lockstep and not a remote peer, and the message says which
    file, which key and what is wrong.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, code="bad_request")

    def __repr__(self) -> str:
        return f"ConfigError({self.message!r})"


def decode(text: str, schema: type, source: str) -> Any:
    """``text`` decoded into ``schema``; ``ConfigError`` naming ``source`` otherwise."""
    try:
        return msgspec.toml.decode(text, type=schema, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain_file(str(exc), schema, text, source)) from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {_toml_error(text, exc)}") from None
    except RecursionError:  # tomllib parses arrays and inline tables recursively
        raise ConfigError(f"{source}: invalid TOML: arrays or tables nested too deeply") from None


def _explain_file(message: str, schema: type, text: str, source: str) -> str:
    import tomllib  # the raw document, to explain the error

    try:
        return explain(message, schema, tomllib.loads(text), source)
    except Exception:  # a path the walk does not know: msgspec's own words, still one line
        return f"{source}: {message}"


def _toml_error(text: str, exc: Exception) -> str:
    import tomllib

    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as toml_exc:
        return str(toml_exc)
    return str(exc)


# --------------------------------------------------------------------------- explaining

# Patterns, not compiled here: they serve only on the error path (re caches them).
_AT = r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$"
_STEP = r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[\.\.\.\]"
_ANY_KEY = object()  # msgspec's "[...]": some key of a dict
_MISSING = object()  # the raw value is not at hand
_NOUNS = {
    "int": "an integer", "str": "a string", "bool": "true or false", "object": "a table",
    "array": "an array", "float": "a number", "int | float": "a number", "null": "nothing",
}


def explain(message: str, schema: type, raw: Any, source: str, *, nested: bool = False) -> str:
    """msgspec's ``message`` about ``raw`` decoded as ``schema``, in the file's terms.

    ``source`` names the file, or the table ``raw`` is when ``nested``."""
    import msgspec.inspect

    match = re.match(_AT, message, re.DOTALL)
    problem, path = match.group("problem"), match.group("path") or ""
    steps: list[Any] = []
    for name, index in (m.groups() for m in re.finditer(_STEP, path)):
        steps.append(name if name is not None else (int(index) if index is not None else _ANY_KEY))
    return _Walk(source, problem).run(msgspec.inspect.type_info(schema), raw, steps, top=not nested)


class _Walk:
    """Follows an error path through a schema's type info and the raw document."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem

    def run(self, info: Any, raw: Any, steps: list[Any], top: bool) -> str:
        import msgspec.inspect as mi

        where, table, table_raw = self.source, _struct(info), raw
        i = 0
        while i < len(steps):
            field = steps[i]
            ftype = _field_type(table, field)
            value = table_raw.get(field) if isinstance(table_raw, dict) else None
            rest = steps[i + 1 :]
            inner = _unwrap(ftype)
            if not rest:
                self.choices = _literal_values(table, field)
                if top and isinstance(inner, mi.ListType) and _holds_tables(inner.item_type) and not isinstance(value, list):
                    return f"{where}: '{field}' must be an array of tables [[{field}]]"
                if top and isinstance(inner, mi.DictType) and _struct(_unwrap(inner.value_type)) is not None:
                    return f"{where}: key '{field}' must be tables [{field}.NAME], got {describe(value)}"
                if top and _struct(inner) is not None:
                    return f"{where}: [{field}]: {self.phrase(inner, value, None)}"
                return f"{where}{':' if top else ''} key '{field}': {self.phrase(inner, value, table_raw)}"
            if isinstance(rest[0], str) and _struct(inner) is not None:  # a nested table
                where = f"{where}: [{field}]" if top else f"{where} key '{field}'"
                table, table_raw, top = _struct(inner), value, False
                i += 1
                continue
            # an item of an array or of a table of tables
            item_type = inner.item_type if isinstance(inner, mi.ListType) else getattr(inner, "value_type", None)
            if rest[0] is _ANY_KEY and isinstance(value, dict) and _struct(_unwrap(item_type)) is not None:
                item_struct = _struct(_unwrap(item_type))
                for name, item in value.items():
                    try:
                        msgspec.convert(item, item_struct.cls, dec_hook=dec_hook)
                    except msgspec.ValidationError as exc:
                        label = f"{where}: [{field}.{name}]" if top else f"{where} key '{field}' entry {name!r}"
                        return explain(str(exc), item_struct.cls, item, label, nested=True)
                return f"{where} key '{field}': {self.problem}"
            if not isinstance(rest[0], int) or not isinstance(value, list) or rest[0] >= len(value) or not _holds_tables(item_type):
                # inside an array or table of plain values: name the key, show the whole value
                entry = self.phrase(_unwrap(item_type), _MISSING, None)
                return f"{where}{':' if top else ''} key '{field}': in {describe(value)}: {entry}"
            item = value[rest[0]]
            label = f"{where}: [[{field}]] #{rest[0] + 1}" if top else f"{where} key '{field}' item {rest[0] + 1}"
            union = _unwrap(item_type)
            chosen = _pick(union, item)
            if chosen is None:  # an unknown tag, or a plain value where a table was expected
                tags = _tags(union)
                if rest[1:] and tags and rest[1] == tags[0]:
                    options = ", ".join(tags[1])
                    return f"{label} key '{rest[1]}': {shown(item.get(rest[1]))} is not one of {options}"
                return f"{label}: {self.phrase(union, item, None)}"
            where, table, table_raw, top = label, chosen, item, False
            i += 2
        return f"{where}: {self.phrase(table, table_raw, None)}"

    def phrase(self, info: Any, value: Any, table_raw: Any) -> str:
        """The problem in words, for a value of type ``info`` (or the table ``info``)."""
        import msgspec.inspect as mi

        problem = self.problem
        struct = _struct(info)
        if struct is not None and isinstance(value, dict):
            unknown = re.match(r"Object contains unknown field `(.*)`", problem)
            missing = re.match(r"Object missing required field `(.*)`", problem)
            fields = [f.name for f in struct.fields]
            required = [f.name for f in struct.fields if f.required and f.name not in value]
            if missing or (unknown and required):
                key = missing.group(1) if missing else required[0]
                said = getattr(struct.cls, "missing", {}).get(key)
                if said:
                    return said
                import difflib

                close = difflib.get_close_matches(key, sorted(set(value) - set(fields)), n=1)
                typo = f" (is '{close[0]}' a typo for it?)" if close else ""
                return f"required key '{key}' is missing{typo}"
            if unknown:
                import difflib

                key = unknown.group(1)
                known = sorted({*fields, *([struct.tag_field] if struct.tag_field else [])})
                close = difflib.get_close_matches(key, known, n=1)
                suggestion = f" (did you mean '{close[0]}'?)" if close else ""
                hint = getattr(struct.cls, "hint", "")
                return f"unknown key '{key}'{suggestion}; known keys: {', '.join(known)}{hint}"
        if problem.startswith("Invalid enum value") and isinstance(info, mi.LiteralType):
            choices = getattr(self, "choices", None) or info.values  # declared order if known
            return f"{shown(value)} is not one of {', '.join(map(str, choices))}"
        bound = re.match(r"Expected `int` (>=|<=) (-?\d+)$", problem)
        if bound:
            side = "less than the minimum" if bound.group(1) == ">=" else "more than the maximum"
            return f"{value} is {side} {bound.group(2)}"
        expected = re.match(r"Expected `([^`]*)`, got `[^`]*`$", problem)
        if expected:
            noun = _NOUNS.get(expected.group(1), expected.group(1))
            got = re.search(r"got `([^`]*)`$", problem).group(1)  # type: ignore[union-attr]
            return f"expected {noun}, got {_NOUNS.get(got, got) if value is _MISSING else describe(value)}"
        missing = re.match(r"Object missing required field `(.*)`", problem)
        if missing:
            return f"required key '{missing.group(1)}' is missing"
        unknown = re.match(r"Object contains unknown field `(.*)`", problem)
        if unknown:
            return f"unknown key '{unknown.group(1)}'"
        return problem


def _unwrap(info: Any) -> Any:
    """The type inside ``Metadata`` (Annotated) and ``X | None`` (TOML has no null)."""
    import msgspec.inspect as mi

    while True:
        if isinstance(info, mi.Metadata):
            info = info.type
        elif isinstance(info, mi.UnionType):
            kept = [t for t in info.types if not isinstance(t, mi.NoneType)]
            if len(kept) != 1:
                return mi.UnionType(tuple(kept)) if len(kept) != len(info.types) else info
            info = kept[0]
        else:
            return info


def _literal_values(table: Any, name: str) -> tuple[Any, ...]:
    """The values of a ``Literal`` field in declared order (msgspec.inspect sorts them)."""
    from typing import Literal, get_args, get_origin, get_type_hints

    if table is None:
        return ()
    hint = get_type_hints(table.cls).get(name)
    pending = [hint]
    while pending:
        hint = pending.pop()
        if get_origin(hint) is Literal:
            return get_args(hint)
        pending.extend(get_args(hint))
    return ()


def _holds_tables(info: Any) -> bool:
    """Whether values of ``info`` are tables (a Struct, or a union of tagged ones)."""
    import msgspec.inspect as mi

    info = _unwrap(info)
    types = info.types if isinstance(info, mi.UnionType) else (info,)
    return any(isinstance(t, mi.StructType) for t in types)


def _struct(info: Any) -> Any:
    import msgspec.inspect as mi

    return info if isinstance(info, mi.StructType) else None


def _field_type(table: Any, name: str) -> Any:
    import msgspec.inspect as mi

    if table is not None:
        for field in table.fields:
            if field.name == name:
                return field.type
    return mi.AnyType()


def _tags(info: Any) -> tuple[str, tuple[str, ...]] | None:
    """(tag field, tags) of a union of tagged Structs."""
    import msgspec.inspect as mi

    types = info.types if isinstance(info, mi.UnionType) else (info,)
    tagged = [t for t in types if isinstance(t, mi.StructType) and t.tag_field]
    return (tagged[0].tag_field, tuple(t.tag for t in tagged)) if tagged else None


def _pick(info: Any, item: Any) -> Any:
    """The Struct type of ``info`` that the raw table ``item`` decodes as, if any."""
    import msgspec.inspect as mi

    if not isinstance(item, dict):
        return None
    types = info.types if isinstance(info, mi.UnionType) else (info,)
    for t in types:
        if isinstance(t, mi.StructType) and (t.tag_field is None or item.get(t.tag_field) == t.tag):
            return t
    return None
