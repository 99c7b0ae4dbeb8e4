"""`plan3d schema`: the JSON Schema of every --json output, and real outputs validated against it.

Validation uses the `jsonschema` package when it is installed, and always a small validator for
the subset pydantic generates (so the test runs without it); the small one is also strict about
undeclared keys, which keeps the schema a complete description of the output."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.cli import app
from planner.outputs.schema import COMMANDS

runner = CliRunner()
RUNS = Path(__file__).parents[1] / "data" / "calibrate" / "runs.csv"

OUTPUTS = {
    "explain": [
        ["explain", "-m", "70b", "-n", "512", "--tp", "8", "--pp", "4", "--gbs", "1024"],
        ["explain", "-m", "70b", "-n", "512", "--tp", "8", "--pp", "4", "--gbs", "1024",
         "--emit", "megatron", "--train-tokens", "15T", "--price", "2"],
        ["explain", "-m", "1t", "-n", "8", "--tp", "8"],  # exit 1: still the same schema
    ],
    "search": [
        ["search", "-m", "70b", "-n", "512", "--top", "3"],
        ["search", "-m", "8b", "-n", "64", "--emit", "torchtitan", "--train-tokens", "1T"],
    ],
    "validate": [["validate"]],
    "models": [["models"]],
    "hardware": [["hardware"]],
    "calibrate": [["calibrate", str(RUNS)]],
    "compare": [
        ["compare", "-m", "8b", "--hw", "h100-nvlink,b200-nvlink", "-n", "16,32", "--gbs", "256",
         "--train-tokens", "1T", "--price", "h100-nvlink=2"],
        ["compare", "-m", "405b", "--hw", "h100-nvlink", "-n", "8", "--train-tokens", "15T"],
    ],
}


def schema_of(command):
    r = runner.invoke(app, ["schema", command])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# ---------------------------------------------------------------------------------------------
# A small validator for what pydantic's generator uses (draft 2020-12 subset)

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _type_ok(value, kind):
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, TYPES[kind])


def check(value, schema, root, path="$", strict=True):
    """A list of problems (empty: valid)."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        return check(value, root["$defs"][name], root, path, strict)
    problems = []
    for key in ("anyOf", "oneOf"):
        if key in schema:
            passing = [s for s in schema[key] if not check(value, s, root, path, strict)]
            if not passing or (key == "oneOf" and len(passing) > 1):
                problems.append(f"{path}: matches {len(passing)} of {key}")
    for sub in schema.get("allOf", []):
        problems += check(value, sub, root, path, strict)
    kinds = schema.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_type_ok(value, k) for k in kinds):
            return problems + [f"{path}: {value!r:.60} is not {kinds}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{path}: {value!r} != {schema['const']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, ok in (("minimum", lambda v, b: v >= b), ("maximum", lambda v, b: v <= b),
                        ("exclusiveMinimum", lambda v, b: v > b),
                        ("exclusiveMaximum", lambda v, b: v < b)):
            if key in schema and not ok(value, schema[key]):
                problems.append(f"{path}: {value} violates {key} {schema[key]}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{path}: missing required {name!r}")
        extra = schema.get("additionalProperties", not strict if props else True)
        for name, item in value.items():
            if name in props:
                problems += check(item, props[name], root, f"{path}.{name}", strict)
            elif extra is False:
                problems.append(f"{path}: undeclared key {name!r}")
            elif isinstance(extra, dict):
                problems += check(item, extra, root, f"{path}.{name}", strict)
    if isinstance(value, list):
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items")
            if isinstance(sub, dict):
                problems += check(item, sub, root, f"{path}[{i}]", strict)
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{path}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{path}: more than {schema['maxItems']} items")
    return problems


def test_the_small_validator_catches_what_it_should():
    schema = schema_of("explain")
    r = runner.invoke(app, OUTPUTS["explain"][0] + ["--json"])
    good = json.loads(r.stdout)
    assert check(good, schema, schema) == []
    bad = json.loads(r.stdout)
    bad["memory"]["fits"] = "yes"
    del bad["time"]["step_s"]
    bad["config"]["zero_stage"] = 7
    bad["surprise"] = 1
    problems = " ".join(check(bad, schema, schema))
    for needle in ("fits", "step_s", "zero_stage", "surprise"):
        assert needle in problems, problems


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_real_outputs_match_their_schema(command):
    schema = schema_of(command)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["title"] == f"plan3d {command} --json"
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None:
        jsonschema.Draft202012Validator.check_schema(schema)
    for args in OUTPUTS[command]:
        r = runner.invoke(app, args + ["--json"])
        assert r.exit_code in (0, 1), r.output
        data = json.loads(r.stdout)
        assert check(data, schema, schema) == [], args
        if jsonschema is not None:
            jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)


def test_explain_and_search_schemas_document_the_launch_settings():
    for command in ("explain", "search"):
        schema = schema_of(command)
        assert "launch" in schema["properties"]
        assert "launch" not in schema.get("required", [])
        launch = schema["$defs"]["EmitResult"]
        assert {"framework", "format", "text", "version_note", "notes"} <= set(launch["properties"])
    r = runner.invoke(app, OUTPUTS["explain"][1] + ["--json"])
    assert json.loads(r.stdout)["launch"]["framework"] == "megatron"


def test_schemas_document_the_goodput():
    # explain and search carry each plan's goodput terms; the budget says where its goodput came
    # from; compare's --goodput is optional (each cell's own without it)
    for command in ("explain", "search"):
        defs = schema_of(command)["$defs"]
        assert {"failures_per_gpu_hour", "interruptions_per_day", "mtbf_s", "checkpoint_bytes",
                "checkpoint_write_s", "checkpoint_interval_s", "restart_s",
                "fraction"} <= set(defs["Goodput"]["required"])
        assert defs["Budget"]["properties"]["goodput_from"]["enum"] == ["model", "--goodput"]
    compare = schema_of("compare")
    assert "goodput" not in compare.get("required", [])
    hardware = schema_of("hardware")["$defs"]
    assert {"write_gb_per_s_per_gpu"} <= set(hardware["Storage"]["required"])
    assert {"failures_per_gpu_hour", "restart_s"} <= set(hardware["Reliability"]["properties"])


def test_schema_without_a_command_gives_all_of_them():
    r = runner.invoke(app, ["schema"])
    assert r.exit_code == 0
    every = json.loads(r.stdout)
    assert set(every) == set(COMMANDS)
    for command in COMMANDS:
        assert every[command] == schema_of(command)


def test_schema_of_an_unknown_command_is_a_usage_error():
    r = runner.invoke(app, ["schema", "plan"])
    assert r.exit_code == 2
    assert r.stderr.startswith("plan3d: error: no schema for 'plan'")
