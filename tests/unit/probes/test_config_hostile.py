"""Hostile lockstep.toml and PLAN.toml: any document is either a valid Config/Plan or a
one-line ConfigError naming the file; never another exception."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from probes.config import Config, ConfigError, parse_config
from probes.plan import Plan

KEYS = [
    "coordinator", "verify", "checks", "probe", "rule", "plan", "step", "mode", "heartbeat", "liveness",
    "lock_delay", "auto_claim", "oneshot_ttl", "policy", "max_repair_loops", "cmd", "timeout", "autofix", "cwd",
    "name", "kind", "every", "path", "sha256", "dir", "pattern", "argv", "expect_exit", "creates", "env", "url",
    "status", "contains", "json_path", "equals", "at_least", "match", "count", "names", "exact", "threshold",
    "finding", "response", "min_failing", "max", "task", "agent", "message", "id", "run", "expect", "pre",
    "post", "on_pre_fail", "on_post_fail", "retries", "rollback", "unit", "x", "respone",
]
WORDS = [
    "write", "build", "command", "http", "processes", "handoff", "serial", "off", "retry", "touch", "notify",
    "5m", "0s", "-1s", "1h30m", "http://127.0.0.1:1/", "http://example.com/", "../x", "/abs", "(", "*",
    "endpoint failing", "a", "", " ", "0" * 64,
]

scalars = st.one_of(
    st.sampled_from(WORDS),
    st.text(max_size=8),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    ),
    max_leaves=12,
)
TOP = ["coordinator", "verify", "checks", "probe", "rule", "plan", "step"]
tables = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)
kinded = st.builds(lambda t, k: {**t, "kind": k}, tables, st.sampled_from(WORDS[:6]))
documents = st.dictionaries(
    st.one_of(st.sampled_from(TOP), st.sampled_from(KEYS)),
    st.one_of(values, tables, st.dictionaries(st.sampled_from(KEYS), tables, max_size=3),
              st.lists(st.one_of(tables, kinded), max_size=3)),
    max_size=5,
)


def _toml(value: object) -> str:
    """A TOML value (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"


def _document(doc: dict) -> str:
    return "".join(f"{json.dumps(key)} = {_toml(value)}\n" for key, value in doc.items())


@settings(max_examples=200, deadline=None)
@given(documents)
def test_any_lockstep_toml_is_a_config_or_a_config_error(doc):
    try:
        config = parse_config(_document(doc), source="repo/lockstep.toml")
    except ConfigError as exc:
        assert exc.message.startswith("repo/lockstep.toml:") and "\n" not in exc.message.strip(), exc.message
        assert len(exc.message) < 1000, exc.message
    else:
        assert isinstance(config, Config)


@settings(max_examples=150, deadline=None)
@given(documents)
def test_any_plan_toml_is_a_plan_or_a_config_error(doc):
    try:
        plan = Plan.parse(_document(doc), source="plans/PLAN.toml", probes={})
    except ConfigError as exc:
        assert exc.message.startswith("plans/PLAN.toml:"), exc.message
    else:
        assert isinstance(plan, Plan)


def test_a_huge_value_gives_a_short_message():
    for text in (f"[coordinator]\nheartbeat = '{'9' * 100_000}x'\n", f"[verify]\npolicy = '{'p' * 100_000}'\n",
                 f"[checks.unit]\ncmd = 'x'\ncwd = '/{'a' * 100_000}'\n"):
        try:
            parse_config(text)
        except ConfigError as exc:
            assert len(exc.message) < 300, exc.message[:300]
        else:
            raise AssertionError("accepted")


def test_nesting_without_end_is_a_one_line_config_error():
    """tomllib parses arrays and inline tables recursively: a few KB of ``[[[[`` once
    raised RecursionError past every caller (serve printed a traceback)."""
    for document in ("x = " + "[" * 5_000 + "]" * 5_000, "x = " + "{a = " * 3_000 + "1" + "}" * 3_000):
        for parse in (lambda text: parse_config(text, source="lockstep.toml"), lambda text: Plan.parse(text, "PLAN.toml")):
            try:
                parse(document)
            except ConfigError as exc:
                assert "nested too deeply" in exc.message and "\n" not in exc.message
            else:
                raise AssertionError("a document nested 5,000 deep was accepted")
