"""lockstep.toml: durations, schema, strictness, suite detection, and the docs agreeing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from probes.config import (
    CONFIG_FILENAME,
    DEFAULT_CHECK_TIMEOUT,
    DEFAULT_PROBE_TIMEOUT,
    PROBE_KINDS,
    PROBE_PARAMS,
    RESPONSE_ACTIONS,
    RESPONSE_PARAMS,
    Check,
    Config,
    ConfigError,
    CoordinatorConfig,
    LandConfig,
    Probe,
    VerifyConfig,
    detect_suite,
    load_config,
    parse_config,
    parse_duration,
)
from probes.schema import dec_hook
from protocol.errors import LockstepError, PeerError, UsageError

DOCS = Path(__file__).resolve().parents[3] / "docs" / "config.md"


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("1h2m3s4ms", 3723.004),
        ("1.5s", 1.5),
        (" 10s ", 10.0),
        ("0s", 0.0),
        (12, 12.0),
        (0.5, 0.5),
        (0, 0.0),
    ],
)
def test_parse_duration_accepts(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    ["", "30", "5 m", "30m1h", "1m1m", "1d", "-5s", "s", "1h30", "ms", "1.s", True, None, [1],
     -1, float("nan"), float("inf"), "1" + "0" * 400 + "s"],
)
def test_parse_duration_refuses(value):
    with pytest.raises(ConfigError) as info:
        parse_duration(value)
    assert "duration" in str(info.value)


def test_parse_duration_error_names_where():
    with pytest.raises(ConfigError, match=r"^lockstep.toml: \[verify\] key 'x': '5 min'"):
        parse_duration("5 min", where="lockstep.toml: [verify] key 'x'")


@pytest.mark.parametrize(
    ("key", "value"),
    [("keep", "1" + "0" * 400 + "d"), ("keep", "1" + "0" * 400 + "h"), ("max_size", "1" + "0" * 400 + "GB")],
)
def test_digits_past_a_float_are_a_config_error_not_infinity(key, value):
    # float("1000...0") is inf: refused as a duration would be, never a traceback or an endless keep
    with pytest.raises(ConfigError, match=rf"^lockstep.toml: \[ledger\] key '{key}': .* is not a (duration|size)"):
        parse_config(f'[ledger]\n{key} = "{value}"\n')


@pytest.mark.parametrize(
    ("document", "table", "key", "why"),
    [
        ("[coordinator]\nliveness = 99999999999999999999999\n", "[coordinator]", "liveness", "is more than the maximum 100"),
        ("[ledger]\nmax_size = 99999999999999999999999\n", "[ledger]", "max_size", "must fit in 64 bits"),
        ('[ledger]\nmax_size = "99999999999999999999999GB"\n', "[ledger]", "max_size", "must fit in 64 bits"),
        ("[verify]\nmax_repair_loops = 99999999999999999999999\n", "[verify]", "max_repair_loops", "is more than the maximum 100"),
        ('[[probe]]\nname = "p"\nkind = "command"\nargv = ["true"]\nexpect_exit = -99999999999999999999999\n',
         "[[probe]] #1", "expect_exit", "must fit in 64 bits"),
    ],
)
def test_an_integer_past_64_bits_is_a_config_error(document, table, key, why):
    # Python reads any TOML integer; one past 64 bits used to be accepted, then crash the
    # coordinator when a reply carrying it was encoded (a setting with a maximum says that)
    with pytest.raises(ConfigError) as info:
        parse_config(document)
    assert info.value.message.startswith(f"lockstep.toml: {table}")
    assert f"key '{key}': " in info.value.message and why in info.value.message


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ('[[probe]]\nname = "p"\nkind = "command"\ncmd = "true"\ntimeout = "1ms"\n', "[[probe]] #1"),
        ('[[probe]]\nname = "p"\nkind = "command"\ncmd = "true"\ntimeout = 5e-324\n', "[[probe]] #1"),
        ('[[probe]]\nname = "p"\nkind = "command"\ncmd = "true"\ntimeout = 1e308\n', "[[probe]] #1"),
        ('[checks.t]\ncmd = "true"\ntimeout = "25h"\n', "[checks.t]"),
    ],
)
def test_a_timeout_no_probe_runs_with_is_refused_when_the_file_is_read(document, where):
    # it loaded, and every run of the probe or check then failed on its timeout
    with pytest.raises(ConfigError) as info:
        parse_config(document)
    assert info.value.message.startswith(f"lockstep.toml: {where} key 'timeout': ")
    assert info.value.message.endswith("is out of bounds: a timeout is from 10ms to 24h")
    assert parse_config('[checks.t]\ncmd = "true"\ntimeout = "24h"\n').checks[0].timeout == 86400


@pytest.mark.parametrize("value", [2**70, "99999999999999999999999999", "99999999999999999999GB"])
def test_a_size_past_64_bits_is_refused_wherever_it_is_read(value):
    # `check bundle --max-size 9999...` converts here, not through a Table: it crashed encoding the request
    from probes.schema import Bytes, Size

    for kind in (Size, Bytes):
        with pytest.raises(msgspec.ValidationError, match="fit in 64 bits"):
            msgspec.convert(value, kind, dec_hook=dec_hook)


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ('[verify]\nenv = {A = "x\\u0000y"}\n', "[verify]: key 'env'"),
        ('[checks.a]\ncmd = "tr\\u0000ue"\n', "[checks.a]: key 'cmd'"),
        ('[checks.a]\ncmd = "true"\nenv = {"A\\u0000" = "1"}\n', "[checks.a]: key 'env'"),
        ('[[probe]]\nname = "p"\nkind = "command"\nargv = ["true", "a\\u0000"]\n', "[[probe]] #1: key 'argv'"),
    ],
)
def test_a_nul_character_is_a_config_error_naming_the_key(document, where):
    # it failed at spawn: "internal error running the job", counted as a failing verify round
    with pytest.raises(ConfigError) as info:
        parse_config(document)
    assert info.value.message.startswith(f"lockstep.toml: {where}: ") and "NUL" in info.value.message


def test_a_flag_past_64_bits_is_a_usage_error():
    from coordinator.settings import load_settings

    with pytest.raises(UsageError, match="key 'liveness': .* is more than the maximum 100"):
        load_settings(None, liveness=2**64)


def test_config_error_is_a_usage_error_with_code_bad_request():
    # Our own user's input (exit 2), not a remote peer's fault; --json still says bad_request.
    with pytest.raises(UsageError) as info:
        parse_config("[verify]\npolicy = 'sometimes'\n")
    assert info.value.code == "bad_request"
    assert isinstance(info.value, LockstepError) and not isinstance(info.value, PeerError)


# ---------------------------------------------------------------- schema


def test_empty_file_gives_defaults_and_asks_for_detection():
    config = parse_config("")
    assert config.coordinator == CoordinatorConfig()
    assert config.verify == VerifyConfig(policy="before-final-answer", max_repair_loops=3)
    assert config.checks == () and config.probes == () and config.rules == ()
    assert config.suite_detected is True


FULL = """
[coordinator]
mode = "parallel-warn"
heartbeat = "2s"
liveness = 5
lock_delay = "30s"
auto_claim = false

[verify]
policy = "after-each-edit-batch"
max_repair_loops = 2

[checks.typecheck]
cmd = "mypy ."

[checks.unit]
cmd = "python -m pytest -x -q"
timeout = "20m"
cwd = "backend"

[checks.format]
cmd = "ruff format ."
autofix = true

[[probe]]
name = "api-health"
kind = "http"
url = "http://127.0.0.1:8000/health"
status = 200
json_path = "$.status"
equals = "ok"
every = "1m"
timeout = "5s"

[[probe]]
name = "workers"
kind = "processes"
match = "celery worker"
count = 4
every = "5m"

[[probe]]
name = "smoke"
kind = "command"
cmd = "./smoke.sh"
creates = "out/smoke.txt"

[[rule]]
finding = "endpoint failing"
probe = "api-health"
response = "restart"
cmd = "systemctl --user restart api"

[[rule]]
finding = "processes missing"
min_failing = 1
response = "queue_task"
task = "find out why a worker died"
agent = "ops"

[[rule]]
finding = "*"
response = "notify"
message = "something failed"
"""


def test_full_config():
    config = parse_config(FULL)
    assert config.coordinator == CoordinatorConfig(
        mode="parallel-warn", heartbeat=2.0, liveness=5, lock_delay=30.0, auto_claim=False
    )
    assert config.verify == VerifyConfig(policy="after-each-edit-batch", max_repair_loops=2)
    # Checks keep file order, defaults filled in.
    assert [c.name for c in config.checks] == ["typecheck", "unit", "format"]
    assert config.checks[0] == Check(name="typecheck", cmd="mypy .", timeout=DEFAULT_CHECK_TIMEOUT)
    assert config.checks[1].timeout == 1200.0 and config.checks[1].cwd == "backend"
    assert config.checks[2].autofix is True
    assert config.suite_detected is False
    api = config.probe("api-health")
    assert api == Probe(
        name="api-health",
        kind="http",
        params={"url": "http://127.0.0.1:8000/health", "status": 200, "json_path": "$.status",
                "equals": "ok"},
        every=60.0,
        timeout=5.0,
    )
    assert config.probe("smoke").every is None
    assert config.probe("smoke").timeout == DEFAULT_PROBE_TIMEOUT
    assert [p.name for p in config.scheduled_probes()] == ["api-health", "workers"]
    assert [r.response for r in config.rules] == ["restart", "queue_task", "notify"]
    assert config.rules[0].cmd == "systemctl --user restart api"
    assert config.rules[0].origin == "lockstep.toml: [[rule]] #1"
    assert config.rules[1].task == "find out why a worker died" and config.rules[1].agent == "ops"
    assert config.rules[2].message == "something failed"


def test_retry_rule_gets_a_default_bound():
    config = parse_config('[[rule]]\nfinding = "write lost"\nresponse = "retry"\n')
    assert config.rules[0].max == 3
    config = parse_config('[[rule]]\nfinding = "write lost"\nresponse = "retry"\nmax = 0\n')
    assert config.rules[0].max == 0


BAD = [
    # (toml, fragments the message must contain: the file, the key, what is wrong)
    ("nonsense = 1", ["unknown key 'nonsense'"]),
    ("[[check]]\ncmd = 'x'", ["unknown key 'check'", "did you mean 'checks'", "[checks.NAME]"]),
    ("[verify]\npolicy = 'sometimes'", ["[verify] key 'policy'", "'sometimes' is not one of"]),
    ("[verify]\npolcy = 'off'", ["[verify]", "unknown key 'polcy'", "did you mean 'policy'"]),
    ("[verify]\nmax_repair_loops = -1", ["[verify] key 'max_repair_loops'", "minimum 0"]),
    ("[verify]\nmax_repair_loops = '3'", ["key 'max_repair_loops'", "expected an integer"]),
    ("[verify]\nmax_repair_loops = true", ["key 'max_repair_loops'", "expected an integer"]),
    ("[coordinator]\nmode = 'yolo'", ["[coordinator] key 'mode'", "parallel-strict"]),
    ("[coordinator]\nheartbeat = '1 s'", ["[coordinator] key 'heartbeat'", "not a duration"]),
    ("[coordinator]\nheartbeat = '0s'", ["[coordinator] key 'heartbeat'", "longer than zero"]),
    ("[coordinator]\nliveness = 0", ["[coordinator] key 'liveness'", "minimum 1"]),
    ("[coordinator]\nauto_claim = 'yes'", ["[coordinator] key 'auto_claim'", "true or false"]),
    ("verify = 3", ["[verify]", "expected a table"]),
    ("[checks.unit]\ntimeout = '1m'", ["[checks.unit]", "required key 'cmd'"]),
    ("[checks.unit]\ncmd = 'x'\ntimeout = 'soon'", ["[checks.unit] key 'timeout'", "not a duration"]),
    ("[checks.unit]\ncmd = 'x'\nautofx = true", ["[checks.unit]", "unknown key 'autofx'",
                                                 "did you mean 'autofix'"]),
    ("[checks.unit]\ncmd = 'x'\ncwd = '../elsewhere'", ["[checks.unit] key 'cwd'", "'..'"]),
    ("[checks.unit]\ncmd = 'x'\ncwd = '/abs'", ["[checks.unit] key 'cwd'", "absolute"]),
    ("[checks.unit]\ncmd = ''", ["[checks.unit] key 'cmd'", "must not be empty"]),
    ("[checks.'bad name']\ncmd = 'x'", ["[checks.bad name]", "not a valid name"]),
    ("[[checks]]\ncmd = 'x'", ["key 'checks'", "[checks.NAME]"]),
    ("[[probe]]\nkind = 'http'\nurl = 'http://127.0.0.1/'", ["[[probe]] #1", "required key 'name'"]),
    ("[[probe]]\nname = 'a'\nkind = 'ftp'", ["[[probe]] #1 key 'kind'", "'ftp' is not one of"]),
    ("[[probe]]\nname = 'a'\nkind = 'http'", ["[[probe]] #1", "required key 'url'"]),
    ("[[probe]]\nname = 'a'\nkind = 'http'\nurl = 'http://127.0.0.1/'\nequal = 1",
     ["[[probe]] #1", "unknown key 'equal'", "did you mean 'equals'", "kind 'http' takes"]),
    ("[[probe]]\nname = 'a'\nkind = 'http'\nurl = 'http://example.com/'",
     ["[[probe]] #1 key 'url'", "loopback"]),
    ("[[probe]]\nname = 'a'\nkind = 'http'\nurl = 'http://127.0.0.1/'\nstatus = 42",
     ["key 'status'", "minimum 100"]),
    ("[[probe]]\nname = 'a'\nkind = 'command'", ["[[probe]] #1", "exactly one of 'cmd'"]),
    ("[[probe]]\nname = 'a'\nkind = 'command'\ncmd = 'x'\nargv = ['x']", ["exactly one of 'cmd'"]),
    ("[[probe]]\nname = 'a'\nkind = 'command'\nargv = []", ["key 'argv'", "non-empty array"]),
    ("[[probe]]\nname = 'a'\nkind = 'processes'\nmatch = '('", ["key 'match'", "regular expression"]),
    ("[[probe]]\nname = 'a'\nkind = 'write'\npath = 'x'\nsha256 = 'abc'", ["key 'sha256'", "64 hex"]),
    ("[[probe]]\nname = 'a'\nkind = 'handoff'\npath = 'H.md'\nthreshold = 101", ["key 'threshold'"]),
    ("[[probe]]\nname = 'a'\nkind = 'build'\ndir = 'dist'\nevery = 'never'", ["key 'every'"]),
    ("[[probe]]\nname = 'a'\nkind = 'build'\ndir = 'dist'\n[[probe]]\nname = 'a'\nkind = 'build'\ndir = 'b'",
     ["[[probe]] #2 key 'name'", "already used"]),
    ("probe = 1", ["'probe' must be an array of tables"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'reboot'", ["[[rule]] #1 key 'response'", "'reboot' is not one of"]),
    ("[[rule]]\nfinding = 'x'\nrespone = 'retry'", ["[[rule]] #1", "required key 'response'",
                                                   "'respone' a typo"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'notify'\nmin_failng = 2", ["unknown key 'min_failng'"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'touch'", ["[[rule]] #1", "'touch' needs the key 'path'"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'queue_task'", ["'queue_task' needs the key 'task'"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'notify'\ncmd = 'reboot'",
     ["[[rule]] #1 key 'cmd'", "response 'notify' takes no 'cmd'"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'retry'\nmax = -1", ["[[rule]] #1 key 'max'", "minimum 0"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'notify'\nmin_failing = 0", ["key 'min_failing'", "minimum 1"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'notify'\nprobe = 'nope'", ["[[rule]] #1 key 'probe'",
                                                                     "'nope' names no [[probe]]"]),
    ("[[rule]]\nfinding = 'enpoint failing'\nresponse = 'restart'",
     ["[[rule]] #1 key 'finding'", "did you mean 'endpoint failing'"]),
    ("[[rule]]\nfinding = 'x'\nresponse = 'touch'\npath = '/etc/passwd'", ["key 'path'", "absolute"]),
    ("[verify\n", ["invalid TOML"]),
]


@pytest.mark.parametrize(("text", "fragments"), BAD)
def test_invalid_config_is_refused_with_a_message_naming_file_and_key(text, fragments):
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="repo/lockstep.toml")
    message = str(info.value)
    assert message.startswith("repo/lockstep.toml:"), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_rule_probe_filter_may_name_a_probe_a_check_or_a_kind():
    text = """
[checks.unit]
cmd = "pytest"
[[probe]]
name = "api"
kind = "http"
url = "http://localhost:1/"
[[rule]]
finding = "endpoint failing"
probe = "api"
response = "restart"
[[rule]]
finding = "command failed"
probe = "unit"
response = "notify"
[[rule]]
finding = "write lost"
probe = "write"
response = "retry"
"""
    assert [r.probe for r in parse_config(text).rules] == ["api", "unit", "write"]


def test_custom_finding_phrases_far_from_known_ones_are_accepted():
    config = parse_config('[[rule]]\nfinding = "disk almost full"\nresponse = "notify"\n')
    assert config.rules[0].finding == "disk almost full"


def test_explicit_empty_checks_table_turns_detection_off():
    config = parse_config("[checks]\n")
    assert config.checks == () and config.suite_detected is False


# ---------------------------------------------------------------- probes.model agreement


def test_probe_kinds_and_params_agree_with_builtin():
    from probes import builtin

    assert set(PROBE_KINDS) == set(builtin.PARAMS_TYPES)
    for kind, params in PROBE_PARAMS.items():
        fields = set(builtin.PARAMS_TYPES[kind].__struct_fields__)
        spelled = {"shell" if name == "cmd" else name for name in params}
        assert spelled <= fields, (kind, spelled - fields)


def test_probe_to_spec_is_accepted_by_builtin_prepare(tmp_path):
    from probes import builtin

    config = parse_config(FULL)
    for probe in config.probes:
        spec, _ = builtin.prepare(probe.to_spec(str(tmp_path)))
        assert spec.name == probe.name and spec.cwd == str(tmp_path)
    smoke = config.probe("smoke").to_spec(str(tmp_path))
    assert smoke.params == {"shell": "./smoke.sh", "creates": "out/smoke.txt"}
    write = parse_config("[[probe]]\nname = 'w'\nkind = 'write'\npath = 'a.txt'\n").probes[0]
    spec, params = builtin.prepare(write.to_spec(str(tmp_path), sha256="0" * 64))
    assert params.sha256 == "0" * 64


def test_check_to_spec_runs_in_its_cwd(tmp_path):
    check = parse_config(FULL).checks[1]
    spec = check.to_spec(tmp_path)
    assert spec.kind == "command" and spec.params == {"shell": "python -m pytest -x -q"}
    assert spec.cwd == str(tmp_path / "backend") and spec.timeout == 1200.0


# ---------------------------------------------------------------- load_config, detect_suite


def test_load_config_without_file_detects_the_suite(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    config = load_config(tmp_path)
    assert config.suite_detected is True
    assert [c.cmd for c in config.checks] == ["python -m pytest -x -q"]
    assert config.source == str(tmp_path / CONFIG_FILENAME)


def test_load_config_reads_the_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / CONFIG_FILENAME).write_text('[checks.lint]\ncmd = "ruff check ."\n')
    config = load_config(tmp_path)
    assert [c.name for c in config.checks] == ["lint"] and config.suite_detected is False


def test_load_config_file_without_checks_detects(tmp_path):
    (tmp_path / "Cargo.toml").write_text("[package]\nname = 'x'\n")
    (tmp_path / CONFIG_FILENAME).write_text('[verify]\npolicy = "off"\n')
    config = load_config(tmp_path)
    assert config.verify.policy == "off"
    assert [c.cmd for c in config.checks] == ["cargo check", "cargo test"]


def test_load_config_errors_name_the_full_path(tmp_path):
    (tmp_path / CONFIG_FILENAME).write_text('[verify]\npolicy = "never"\n')
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path / CONFIG_FILENAME))):
        load_config(tmp_path)
    (tmp_path / CONFIG_FILENAME).write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(tmp_path)


def test_detect_suite_empty_repo(tmp_path):
    assert detect_suite(tmp_path) == []


def test_detect_suite_npm_only_existing_scripts_in_fixed_order(tmp_path):
    scripts = {"lint": "eslint .", "build": "vite build", "test": "vitest run", "start": "node ."}
    (tmp_path / "package.json").write_text(json.dumps({"scripts": scripts}))
    checks = detect_suite(tmp_path)
    assert [(c.name, c.cmd) for c in checks] == [
        ("npm-test", "npm run test"),
        ("npm-lint", "npm run lint"),
    ]
    assert all(c.timeout == DEFAULT_CHECK_TIMEOUT and not c.autofix and c.cwd is None for c in checks)


def test_detect_suite_all_ecosystems_in_order(tmp_path):
    scripts = {"test": "jest", "typecheck": "tsc --noEmit", "lint": "eslint ."}
    (tmp_path / "package.json").write_text(json.dumps({"scripts": scripts}))
    (tmp_path / "Cargo.toml").write_text("")
    (tmp_path / "pyproject.toml").write_text("")
    assert [c.cmd for c in detect_suite(tmp_path)] == [
        "npm run typecheck",
        "npm run test",
        "npm run lint",
        "cargo check",
        "cargo test",
        "python -m pytest -x -q",
    ]
    assert detect_suite(tmp_path) == detect_suite(tmp_path)


@pytest.mark.parametrize(
    "content",
    ["{not json", "[1, 2]", '{"scripts": ["test"]}', '{"name": "x"}', '{"scripts": {"test": ""}}', "[" * 100_000 + "]" * 100_000],
    ids=["not-json", "array", "scripts-list", "no-scripts", "empty-script", "nested-too-deeply"],
)
def test_detect_suite_ignores_unusable_package_json(tmp_path, content):
    (tmp_path / "package.json").write_text(content)
    (tmp_path / "pyproject.toml").write_text("")
    assert [c.name for c in detect_suite(tmp_path)] == ["pytest"]


def test_detect_suite_ignores_directories_named_like_manifests(tmp_path):
    (tmp_path / "Cargo.toml").mkdir()
    assert detect_suite(tmp_path) == []


# ---------------------------------------------------------------- docs


def _doc_toml_blocks(path: Path) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_docs_example_parses():
    blocks = _doc_toml_blocks(DOCS)
    assert blocks, "docs/config.md has no ```toml example"
    for block in blocks:
        assert isinstance(parse_config(block, source="docs/config.md"), Config)


def test_docs_mention_every_key_and_value():
    text = DOCS.read_text()
    keys = set(CoordinatorConfig.__struct_fields__) | set(VerifyConfig.__struct_fields__) | set(LandConfig.__struct_fields__)
    keys |= {"cmd", "timeout", "autofix", "cwd", "name", "kind", "every", "finding", "probe",
             "min_failing", "response"}
    keys |= {param for params in PROBE_PARAMS.values() for param in params}
    keys |= {param for params in RESPONSE_PARAMS.values() for param in params} | {"message"}
    values = set(RESPONSE_ACTIONS) | set(PROBE_KINDS)
    values |= {"parallel-strict", "parallel-warn", "serial"}
    values |= {"after-each-edit-batch", "before-final-answer", "off"}
    for word in sorted(keys | values):
        assert f"`{word}`" in text, f"docs/config.md does not mention `{word}`"


def test_probe_tables_are_derived_from_the_params_structs():
    from probes import builtin
    from probes.config import probe_table

    runtime_only = {"build": {"previous_hash"}, "processes": {"exclude_pids"}, "handoff": {"repo_root", "agent", "base", "known"},
                    "command": {"log", "whole_env"}, "http": {"reach"}, "consistency": {"reach"}, "bundle": {"deploys", "now"}}
    for kind, params in builtin.PARAMS_TYPES.items():
        table = probe_table(kind)
        keys = set(table.__struct_fields__) - {"name", "every", "timeout", "restart"}
        spelled = {"shell" if key == "cmd" else key for key in keys}
        assert spelled | runtime_only.get(kind, set()) == set(params.__struct_fields__), kind
        assert table.__struct_config__.forbid_unknown_fields


def test_a_decoded_config_holds_plain_values():
    config = parse_config(FULL)
    assert type(config.coordinator.heartbeat) is float and type(config.checks[1].cwd) is str
    assert type(config.probe("api-health").params["url"]) is str
    # durations and checked strings are custom types only while decoding, through the hook
    assert msgspec.json.decode(msgspec.json.encode(config), type=Config, dec_hook=dec_hook) == config


def test_docs_parameters_by_kind_are_the_derived_toml_keys():
    from probes.config import probe_params

    section = DOCS.read_text().split("Parameters by kind", 1)[1].split("\n\n", 2)[1]
    documented: dict[str, set[str]] = {}
    kind = None
    for row in section.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        kind = cells[0].strip("`") or kind
        documented.setdefault(kind, set()).add(cells[1].strip("`"))
    assert documented == {k: set(v) for k, v in probe_params().items()}
