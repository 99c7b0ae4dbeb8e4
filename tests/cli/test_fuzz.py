"""Fuzzing the command line and the data files with hypothesis.

Whatever the flags or the file contents: no traceback, an exit code in {0, 1, 2}, errors as one
line on stderr, and any plan printed with exit 0 is a whole layout (dp·tp·pp·cp = gpus) that fits.
"""

import atexit
import itertools
import json
import math
import shutil
import tempfile
import tomllib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None)

# ---------------------------------------------------------------------------------------------
# Values: plausible, edge, absurd and garbage

garbage = st.text(max_size=10)
small = st.integers(min_value=-3, max_value=130).map(str)


def mostly(good, bad, ratio=4):
    """Mostly plausible values (so that plans get made and checked), sometimes anything."""
    return st.one_of(*([good] * ratio), bad)


edge = st.sampled_from(["0", "-1", "1", "2", "8", "3", "1e3", "1.5", "", ",", "auto", "nan",
                        "inf", "-inf", "2,4", "1,2,4,8", "4,,8", "9" * 25, str(2**20),
                        str(2**40), str(2**63), "0x10", " 8 ", "８"])
number = st.one_of(small, edge, garbage)
dims = mostly(st.sampled_from(["1", "2", "4", "8", "1,2", "2,4,8", "16"]), number)

MODELS = ["8b", "70b", "7b", "13b", "mixtral-8x7b", "175b", "llama-3.1-8b", "1t"]
HWS = ["h100-nvlink", "a100-nvlink", "mi300x", "gb200-nvl72"]
FLAGS = {
    "--dp": dims, "--tp": dims, "--pp": dims, "--cp": dims, "--vpp": dims,
    "--mbs": mostly(st.sampled_from(["1", "2", "1,2,4"]), number),
    "--gbs": mostly(st.sampled_from(["64", "256", "1024", "1536"]), number),
    "--seq-len": mostly(st.sampled_from(["2048", "4096", "8192", "131072"]), number),
    "--tokens-per-step": number,
    "--zero": mostly(st.sampled_from(["0", "1", "2", "3", "auto", "1,3"]), garbage),
    "--recompute": mostly(st.sampled_from(["none", "selective", "full", "auto"]), garbage),
    "--schedule": mostly(st.sampled_from(["1f1b", "interleaved", "gpipe"]), garbage),
    "--precision": mostly(st.sampled_from(["bf16", "fp16", "fp8"]), garbage),
    "--attention": mostly(st.sampled_from(["flash", "classic"]), garbage),
    "--grad-dtype": mostly(st.sampled_from(["fp32", "bf16"]), garbage),
    "--hw": mostly(st.sampled_from(HWS), garbage),
    "--train-tokens": mostly(st.sampled_from(["15T", "300B", "1e12"]), number),
    "--price": mostly(st.sampled_from(["2", "0", "2.5"]), number),
    "--gpu-power-w": mostly(st.sampled_from(["700", "1000"]), number),
    "--emit": mostly(st.sampled_from(["megatron", "nemo", "torchtitan", "deepspeed"]),
                        garbage),
}
SEARCH_ONLY = {
    "--top": mostly(st.sampled_from(["1", "3"]), number),
    "--sort": mostly(st.sampled_from(["time", "memory", "mfu"]), garbage),
    "--headroom": mostly(st.sampled_from(["0", "0.1", "0.5"]), number),
}
SWITCHES = ["--sp", "--no-sp", "--no-overlap-grad-reduce", "--allow-tp-across-nodes"]


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(["search", "search", "explain"]))
    model = draw(mostly(st.sampled_from(MODELS), garbage, 10))
    gpus = draw(mostly(st.sampled_from(["8", "64", "256", "512", "4096", str(2**20)]), number,
                       10))
    args = [command, "--model", model, "--gpus", gpus]
    flags = {**FLAGS, **(SEARCH_ONLY if command == "search" else {})}
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=4, unique=True)):
        args += [flag, draw(flags[flag])]
    switches = [s for s in SWITCHES if command == "search" or s != "--allow-tp-across-nodes"]
    args += draw(st.lists(st.sampled_from(switches), max_size=2, unique=True))
    return args + ["--json"]


def strict_json(text):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name} in the output")
    return json.loads(text, parse_constant=refuse)


def check_contract(args, r):
    """The command line's promises, for any input."""
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, repr(r.exception))
    assert r.exit_code in (0, 1, 2), (args, r.exit_code, r.output)
    assert "Traceback" not in r.output, args
    if r.exit_code == 0:
        assert r.stderr == "", (args, r.stderr)
        data = strict_json(r.stdout)
        plans = data["plans"] if "plans" in data else [data]
        assert plans, args
        for plan in plans:
            c = plan["config"]
            gpus = int(args[args.index("--gpus") + 1])
            assert c["dp"] * c["tp"] * c["pp"] * c["cp"] == gpus, args
            assert c["gbs"] == c["dp"] * c["mbs"] * c["n_micro"], args
            assert plan["memory"]["fits"] is True, args
            assert plan["memory"]["total_bytes"] <= plan["memory"]["capacity_bytes"], args
            assert all(math.isfinite(plan["time"][k]) and plan["time"][k] > 0
                       for k in ("step_s", "tokens_per_s")), args
    else:
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("plan3d: error: "), (args, r.stderr)
        if r.exit_code == 2:
            assert r.stdout == "", args
        elif r.stdout:  # explain shows the plan that does not fit, and says so
            assert strict_json(r.stdout)["memory"]["fits"] is False, args


@settings(max_examples=120, **SETTINGS)
@given(command_lines())
def test_fuzz_command_line(args):
    check_contract(args, runner.invoke(app, args))


@st.composite
def plausible_lines(draw):
    """Only well-formed flags, so that most lines make plans, and the plans get checked."""
    command = draw(st.sampled_from(["search", "explain"]))
    gpus = draw(st.sampled_from([8, 16, 24, 64, 96, 128, 512, 1024, 3072, 16384]))
    args = [command, "--model", draw(st.sampled_from(MODELS)), "--gpus", str(gpus),
            "--hw", draw(st.sampled_from(HWS))]
    powers = st.sampled_from(["1", "2", "4", "8"])
    for flag, values in (("--tp", powers), ("--pp", powers), ("--cp", st.sampled_from(["1", "2"])),
                         ("--mbs", powers), ("--gbs", st.sampled_from(["256", "512", "1536"])),
                         ("--seq-len", st.sampled_from(["2048", "4096", "32768"])),
                         ("--zero", st.sampled_from(["0", "1", "3", "auto"])),
                         ("--recompute", st.sampled_from(["none", "full", "auto"]))):
        if draw(st.booleans()):
            args += [flag, draw(values)]
    if command == "explain" and draw(st.booleans()):
        args += ["--pp", "4", "--vpp", "2", "--schedule", "interleaved"] if "--pp" not in args \
            else []
    if draw(st.booleans()):
        args += ["--train-tokens", "1T", "--price", "2"]
    return args + ["--json"]


@settings(max_examples=30, **SETTINGS)
@given(plausible_lines())
def test_fuzz_plausible_layouts(args):
    check_contract(args, runner.invoke(app, args))


# ---------------------------------------------------------------------------------------------
# Files: perturbed model presets, hardware profiles and Hugging Face configs

WORK = Path(tempfile.mkdtemp(prefix="plan3d-fuzz-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
_names = itertools.count()

BASE_MODEL = tomllib.loads((ROOT / "model_presets" / "llama-3.1-8b.toml").read_text())
BASE_HW = tomllib.loads((ROOT / "hardware_profiles" / "h100-nvlink.toml").read_text())
BASE_HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
           "tie_word_embeddings": False}

scalars = st.one_of(
    st.integers(min_value=-5, max_value=200), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(max_size=8),
    st.sampled_from([0, 1, 2**31, 10**30, 0.5, 1e-300, 1e300, "80", "swiglu", "rmsnorm"]))
values = st.one_of(scalars, st.lists(scalars, max_size=3),
                   st.dictionaries(st.text(max_size=5), scalars, max_size=2))


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_string(text: str) -> str:
    """A TOML basic string (control characters and DEL escaped, the rest as is)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def to_toml(data: dict) -> str:
    return "".join(f"{toml_string(k)} = {toml_value(v)}\n" for k, v in data.items())


def paths(data: dict, prefix=()):
    for key, value in data.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from paths(value, prefix + (key,))


@st.composite
def perturbed(draw, base: dict):
    """The base with a few fields deleted, retyped or added (nested tables included)."""
    data = json.loads(json.dumps(base))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        where = draw(st.sampled_from(list(paths(data))))
        parent = data
        for key in where[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["delete", "set", "set", "scale", "add"]))
        if action == "delete":
            parent.pop(where[-1], None)
        elif action == "set":
            parent[where[-1]] = draw(values)
        elif action == "scale" and isinstance(parent.get(where[-1]), (int, float)) \
                and not isinstance(parent.get(where[-1]), bool):
            factor = draw(st.sampled_from([0, -1, 2, 1000, 1e-6, 2**40, 0.5]))
            old = parent[where[-1]]
            parent[where[-1]] = type(old)(old * factor) if isinstance(old, int) and \
                isinstance(factor, int) else old * factor
        else:
            parent[draw(st.text(min_size=1, max_size=8))] = draw(values)
    return data


@st.composite
def file_cases(draw):
    kind = draw(st.sampled_from(["model", "model", "hw", "hw", "hf", "raw"]))
    if kind == "model":
        return "--model", ".toml", to_toml(draw(perturbed(BASE_MODEL)))
    if kind == "hw":
        return "--hw", ".toml", to_toml(draw(perturbed(BASE_HW)))
    if kind == "hf":
        return "--model", ".json", json.dumps(draw(perturbed(BASE_HF)))
    # raw text damage: a valid file cut short or with bytes spliced in
    text = to_toml(BASE_MODEL if draw(st.booleans()) else BASE_HW)
    cut = draw(st.integers(min_value=0, max_value=len(text)))
    junk = draw(st.text(max_size=6))
    flag = "--model" if "n_layers" in text else "--hw"
    return flag, ".toml", text[:cut] + junk + text[cut + draw(st.integers(0, 5)):]


@settings(max_examples=100, **SETTINGS)
@given(file_cases(), st.sampled_from(["search", "search", "explain"]))
def test_fuzz_model_and_profile_files(case, command):
    flag, suffix, text = case
    path = WORK / f"case{next(_names)}{suffix}"
    path.write_text(text, encoding="utf-8")
    args = [command, "--model", "8b", "--gpus", "64", "--hw", "h100-nvlink", "--json"]
    if command == "explain":
        args += ["--tp", "8", "--pp", "2", "--gbs", "256", "--zero", "auto",
                 "--recompute", "auto"]
    args[args.index(flag) + 1] = str(path)
    r = runner.invoke(app, args)
    check_contract(args, r)
    try:
        tomllib.loads(text) if suffix == ".toml" else json.loads(text)
    except ValueError:  # a file that does not parse: the message names it
        assert r.exit_code == 2 and path.name in r.stderr, (text, r.stderr)
