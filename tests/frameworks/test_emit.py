"""planner.frameworks.emit: every framework's output parses, and parsing it back gives the plan's degrees;
what a framework cannot express raises PlanError naming the framework and the reason."""

from __future__ import annotations

import itertools
import json
import math
import shlex
import tomllib

import pytest

from planner.catalog import load_model
from planner.errors import PlanError
from planner.frameworks.emit import FRAMEWORKS, EmitResult, emit
from planner.schema import PlanConfig

# --------------------------------------------------------------------------------------------
# Plans


@pytest.fixture(scope="module")
def llama70b():
    return load_model("70b")


INTERLEAVED = PlanConfig(dp=16, tp=8, pp=4, vpp=2, mbs=1, n_micro=64, gbs=1024, seq_len=8192,
                         zero_stage=1, recompute="selective", sequence_parallel=True,
                         schedule="interleaved")
ZERO3_NO_PP = PlanConfig(dp=64, tp=8, pp=1, mbs=1, n_micro=2, gbs=128, seq_len=8192,
                         zero_stage=3, recompute="full", sequence_parallel=True, schedule="1f1b")
GPIPE_ZERO2 = PlanConfig(dp=8, tp=2, pp=4, mbs=2, n_micro=16, gbs=256, seq_len=4096,
                         zero_stage=2, recompute="none", sequence_parallel=True, schedule="gpipe",
                         grad_dtype="bf16")
GPIPE_ZERO1 = PlanConfig(dp=8, tp=2, pp=4, mbs=2, n_micro=16, gbs=256, seq_len=4096,
                         zero_stage=1, recompute="full", sequence_parallel=False,
                         schedule="gpipe", precision="fp16")
INTERLEAVED_ZERO3_CP = PlanConfig(dp=4, tp=4, pp=4, vpp=4, cp=2, mbs=1, n_micro=32, gbs=128,
                                  seq_len=16384, zero_stage=3, recompute="selective",
                                  sequence_parallel=True, schedule="interleaved",
                                  precision="fp8")

def replace(config: PlanConfig, changes: dict) -> PlanConfig:
    """A validated copy of `config` with `changes` (model_copy would skip validation)."""
    return PlanConfig(**{**config.model_dump(), **changes})


ALL_PLANS = [INTERLEAVED, ZERO3_NO_PP, GPIPE_ZERO2, GPIPE_ZERO1, INTERLEAVED_ZERO3_CP]


# --------------------------------------------------------------------------------------------
# Parsers the tests read the output back with


def parse_args(text: str) -> dict[str, str | None]:
    """Megatron-style args: one `--flag [value]` per line, all but the last ending in ` \\`."""
    lines = text.rstrip("\n").split("\n")
    assert lines, "no arguments"
    flags: dict[str, str | None] = {}
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        assert line.endswith(" \\") != last, f"continuation wrong on line {i}: {line!r}"
        tokens = shlex.split(line.removesuffix(" \\"))
        # torchtitan 0.3 ends on a subcommand (activation-checkpoint:MODE) and takes a list of
        # lists as space-separated values
        subcommand = last and len(tokens) == 1 and ":" in tokens[0]
        assert tokens[0].startswith("--") or subcommand, line
        assert tokens[0] not in flags, f"duplicate {tokens[0]}"
        flags[tokens[0]] = " ".join(tokens[1:]) if len(tokens) > 1 else None
    return flags


def parse_inline_args(text: str) -> dict[str, str | None]:
    """`--flag [value] --flag ...` on one line."""
    flags: dict[str, str | None] = {}
    tokens = shlex.split(text)
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            flags[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return flags


def _scalar(text: str):
    if text in ("null", "~"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"'):
        return json.loads(text)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_yaml_subset(text: str) -> dict:
    """A strict reader for the block-YAML subset emit writes: two-space indentation, `key: value`
    pairs, `key:` heading a nested mapping or a `- item` list, `#` comment lines."""
    rows = []
    for raw in text.split("\n"):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        assert indent % 2 == 0, f"odd indentation: {raw!r}"
        assert "\t" not in raw
        rows.append((indent // 2, raw.strip()))

    def block(i: int, depth: int):
        if rows[i][1].startswith("- "):
            items = []
            while i < len(rows) and rows[i][0] == depth and rows[i][1].startswith("- "):
                items.append(_scalar(rows[i][1][2:]))
                i += 1
            return items, i
        mapping: dict = {}
        while i < len(rows) and rows[i][0] == depth:
            line = rows[i][1]
            key, sep, rest = line.partition(":")
            assert sep and key and " " not in key, f"not a key: {line!r}"
            assert key not in mapping, f"duplicate key {key}"
            rest = rest.strip()
            i += 1
            if rest:
                mapping[key] = _scalar(rest)
            else:
                assert i < len(rows) and rows[i][0] == depth + 1, f"empty block {key}"
                mapping[key], i = block(i, depth + 1)
        return mapping, i

    doc, end = block(0, 0)
    assert end == len(rows), f"unparsed line: {rows[end]}"
    return doc


def titan_stages(parallelism: dict, n_layers: int) -> int:
    """The stage count torchtitan builds: ceil((layers + first + last) / layers_per_stage), the
    embedding and output weighing `first`/`last` layers (default 1 each), or its default of 1
    (single-stage schedules) or 2 (looped schedules) stages per rank."""
    pp = parallelism["pipeline_parallel_degree"]
    if pp == 1:
        return 1
    per_stage = parallelism.get("pipeline_parallel_layers_per_stage")
    if per_stage is None:
        looped = parallelism["pipeline_parallel_schedule"] == "Interleaved1F1B"
        return pp * (2 if looped else 1)
    first = parallelism.get("pipeline_parallel_first_stage_less_layers", 1)
    last = parallelism.get("pipeline_parallel_last_stage_less_layers", 1)
    return math.ceil((n_layers + first + last) / per_stage)


# --------------------------------------------------------------------------------------------
# Shape of every result


def test_frameworks_listed():
    assert FRAMEWORKS == ("megatron", "nemo", "torchtitan", "deepspeed")


@pytest.mark.parametrize("framework,fmt", [("megatron", "args"), ("nemo", "yaml"),
                                           ("torchtitan", "args"), ("torchtitan@0.2", "toml"),
                                           ("deepspeed", "json")])
def test_result_fields(framework, fmt, llama70b):
    r = emit(framework, ZERO3_NO_PP, llama70b)
    assert isinstance(r, EmitResult)
    assert (r.framework, r.format) == (framework.split("@")[0], fmt)
    assert r.text.endswith("\n") and r.text.strip()
    assert "@" in r.version_note  # names a revision
    assert r.notes and all(isinstance(n, str) and n for n in r.notes)
    with pytest.raises(AttributeError):
        r.text = "x"  # frozen


def test_aliases_and_case(llama70b):
    assert emit("Megatron-LM", ZERO3_NO_PP, llama70b).framework == "megatron"
    assert emit(" megatron-bridge ", ZERO3_NO_PP, llama70b).framework == "nemo"


# --------------------------------------------------------------------------------------------
# Megatron-LM


def test_megatron_interleaved_round_trip(llama70b):
    c, m = INTERLEAVED, llama70b
    a = parse_args(emit("megatron", c, m).text)
    assert int(a["--tensor-model-parallel-size"]) == c.tp
    assert int(a["--pipeline-model-parallel-size"]) == c.pp
    assert int(a["--num-virtual-stages-per-pipeline-rank"]) == c.vpp
    assert "--num-layers-per-virtual-pipeline-stage" not in a  # mutually exclusive
    assert int(a["--num-layers"]) // (c.pp * c.vpp) == m.n_layers // (c.pp * c.vpp) == 10
    assert int(a["--context-parallel-size"]) == c.cp
    assert "--sequence-parallel" in a
    assert "--use-distributed-optimizer" in a and "--use-megatron-fsdp" not in a
    assert a["--recompute-granularity"] == "selective" and "--recompute-method" not in a
    assert int(a["--micro-batch-size"]) == c.mbs
    assert int(a["--global-batch-size"]) == c.gbs
    assert int(a["--seq-length"]) == c.seq_len
    assert "--bf16" in a and "--fp16" not in a
    assert "--accumulate-allreduce-grads-in-fp32" in a
    assert "--overlap-grad-reduce" in a
    # auto: Transformer Engine's choice, cuDNN on Hopper+ (the kernel priced), not flash
    assert a["--attention-backend"] == "auto"
    assert int(a["--num-query-groups"]) == m.kv_heads and "--group-query-attention" in a
    # number of micro-batches Megatron derives: gbs / (mbs * dp), dp = world / (tp*pp*cp)
    dp = c.n_gpus // (c.tp * c.pp * c.cp)
    assert c.gbs // (c.mbs * dp) == c.n_micro


def test_megatron_zero3_full_recompute(llama70b):
    a = parse_args(emit("megatron", ZERO3_NO_PP, llama70b).text)
    assert "--use-megatron-fsdp" in a
    assert a["--data-parallel-sharding-strategy"] == "optim_grads_params"
    assert a["--ckpt-format"] == "fsdp_dtensor"
    assert "--no-gradient-accumulation-fusion" in a
    assert a["--recompute-granularity"] == "full"
    assert a["--recompute-method"] == "uniform" and a["--recompute-num-layers"] == "1"
    assert int(a["--pipeline-model-parallel-size"]) == 1
    assert "--num-virtual-stages-per-pipeline-rank" not in a


def test_megatron_gpipe_zero2_is_1f1b_with_note(llama70b):
    r = emit("megatron", GPIPE_ZERO2, llama70b)
    a = parse_args(r.text)
    assert a["--data-parallel-sharding-strategy"] == "optim_grads"
    assert "--grad-reduce-in-bf16" in a
    assert "--num-virtual-stages-per-pipeline-rank" not in a
    assert any("GPipe" in n and "1F1B" in n for n in r.notes)
    assert any("PP" in n and "Megatron-FSDP" in n for n in r.notes)


def test_megatron_fp16_no_sp_and_fp8(llama70b):
    a = parse_args(emit("megatron", GPIPE_ZERO1, llama70b).text)
    assert "--fp16" in a and "--bf16" not in a
    assert "--sequence-parallel" not in a
    a = parse_args(emit("megatron", INTERLEAVED_ZERO3_CP, llama70b).text)
    assert "--bf16" in a and a["--fp8-format"] == "hybrid"
    assert int(a["--context-parallel-size"]) == 2
    assert int(a["--num-virtual-stages-per-pipeline-rank"]) == 4


@pytest.mark.parametrize("overlap", [False, True])
def test_megatron_cuda_connections_note_says_what_validate_args_does(overlap):
    # validate_args (arguments.py l.1452-1479 @ d98e8a64dd), tp > 1 before Blackwell: asserts
    # CUDA_DEVICE_MAX_CONNECTIONS == 1, except with --overlap-moe-expert-parallel-comm, where it
    # warns and suggests 1 or 32 by which overlap to favour
    plan = PlanConfig(dp=8, tp=2, pp=1, ep=8, etp=1, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                      zero_stage=1, moe_a2a_overlap=overlap)
    r = emit("megatron", plan, load_model("qwen3-30b-a3b"))
    assert ("--overlap-moe-expert-parallel-comm" in parse_args(r.text)) == overlap
    (note,) = [n for n in r.notes if "CUDA_DEVICE_MAX_CONNECTIONS" in n]
    if overlap:
        assert "warns" in note and "32" in note and "asserts it" not in note
    else:
        assert note.startswith("export CUDA_DEVICE_MAX_CONNECTIONS=1") and "asserts" in note


# --------------------------------------------------------------------------------------------
# NeMo / Megatron-Bridge


@pytest.mark.parametrize("config", [INTERLEAVED, ZERO3_NO_PP, GPIPE_ZERO2, GPIPE_ZERO1,
                                    INTERLEAVED_ZERO3_CP])
def test_nemo_yaml_round_trip(config, llama70b):
    text = emit("nemo", config, llama70b).text
    doc = parse_yaml_subset(text)
    model = doc["model"]
    assert model["tensor_model_parallel_size"] == config.tp
    assert model["pipeline_model_parallel_size"] == config.pp
    assert (model["virtual_pipeline_model_parallel_size"] or 1) == config.vpp
    assert model["context_parallel_size"] == config.cp
    assert model["sequence_parallel"] is (config.sequence_parallel and config.tp > 1)
    assert model["seq_length"] == doc["dataset"]["seq_length"] == config.seq_len
    assert doc["train"] == {"micro_batch_size": config.mbs, "global_batch_size": config.gbs}
    expected_rc = None if config.recompute.value == "none" else config.recompute.value
    assert model["recompute_granularity"] == expected_rc
    assert doc["ddp"]["use_distributed_optimizer"] is (config.zero_stage >= 1)
    assert doc["optimizer"]["use_distributed_optimizer"] is (config.zero_stage >= 1)
    if config.zero_stage >= 2:
        assert doc["ddp"]["use_megatron_fsdp"] is True
        assert doc["dist"]["use_megatron_fsdp"] is True
        assert doc["checkpoint"]["ckpt_format"] == "fsdp_dtensor"
        assert doc["ddp"]["data_parallel_sharding_strategy"] == (
            "optim_grads" if config.zero_stage == 2 else "optim_grads_params")
    else:
        assert "dist" not in doc and "use_megatron_fsdp" not in doc["ddp"]
    # the gather overlapped as costed and as --emit megatron writes --overlap-param-gather;
    # aligned across the chunks of a virtual pipeline, as Megatron-LM's arguments set it
    gathers = config.overlap_grad_reduce and config.zero_stage >= 1
    assert doc["ddp"].get("overlap_param_gather", False) is gathers
    assert doc["ddp"].get("align_param_gather", False) is (gathers and config.vpp > 1)
    assert doc["mixed_precision"] == {"bf16": "bf16_mixed", "fp16": "fp16_mixed",
                                      "fp8": "bf16_with_fp8_delayed_scaling_mixed"}[
                                          config.precision.value]


@pytest.mark.parametrize("config", ALL_PLANS)
def test_nemo_yaml_parses_with_pyyaml(config, llama70b):
    yaml = pytest.importorskip("yaml")
    text = emit("nemo", config, llama70b).text
    assert yaml.safe_load(text) == parse_yaml_subset(text)


def test_nemo_grad_dtype_mismatch_is_noted(llama70b):
    r = emit("nemo", GPIPE_ZERO2, llama70b)  # bf16 grads under the bf16_mixed recipe
    assert any("grad_reduce_in_fp32 = False" in n for n in r.notes)


def test_yaml_subset_reader_rejects_garbage():
    with pytest.raises(AssertionError):
        parse_yaml_subset("a:\n   b: 1\n")
    with pytest.raises(AssertionError):
        parse_yaml_subset("a: 1\na: 2\n")


# --------------------------------------------------------------------------------------------
# torchtitan


@pytest.mark.parametrize("config", [ZERO3_NO_PP, GPIPE_ZERO2, INTERLEAVED_ZERO3_CP])
def test_torchtitan_toml_round_trip(config, llama70b):
    doc = tomllib.loads(emit("torchtitan@0.2", config, llama70b).text)
    par, tr = doc["parallelism"], doc["training"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == config.dp
    assert par["data_parallel_shard_degree"] == config.dp  # ZeRO-2/3 shard over all of dp
    assert par["tensor_parallel_degree"] == config.tp
    assert par["pipeline_parallel_degree"] == config.pp
    assert par["context_parallel_degree"] == config.cp
    assert titan_stages(par, llama70b.n_layers) == config.pp * config.vpp
    # ZeRO-3 under PP keeps the stage gathered across micro-batches ('default'), as costed
    want = {2: "never", 3: "default" if config.pp > 1 else "always"}[config.zero_stage]
    assert par["fsdp_reshard_after_forward"] == want
    assert tr["seq_len"] == config.seq_len
    assert tr["global_batch_size"] == config.gbs
    dp_batch = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    grad_accum = tr["global_batch_size"] // (tr["local_batch_size"] * dp_batch)
    if config.pp > 1:
        micro = tr["local_batch_size"] // par["pipeline_parallel_microbatch_size"]
        assert par["pipeline_parallel_microbatch_size"] == config.mbs
        assert (micro, grad_accum) == (config.n_micro, 1)
    else:
        assert (tr["local_batch_size"], grad_accum) == (config.mbs, config.n_micro)
    assert doc["activation_checkpoint"]["mode"] == config.recompute.value


def test_torchtitan_schedules(llama70b):
    par = tomllib.loads(emit("torchtitan@0.2", GPIPE_ZERO2, llama70b).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "GPipe"
    par = tomllib.loads(emit("torchtitan@0.2", INTERLEAVED_ZERO3_CP, llama70b).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "Interleaved1F1B"
    one_f = replace(INTERLEAVED_ZERO3_CP, {"vpp": 1, "schedule": "1f1b"})
    par = tomllib.loads(emit("torchtitan@0.2", one_f, llama70b).text)["parallelism"]
    assert par["pipeline_parallel_schedule"] == "1F1B"
    assert titan_stages(par, llama70b.n_layers) == 4


def test_torchtitan_zero0_pure_ddp(llama70b):
    ddp = PlanConfig(dp=8, mbs=1, n_micro=4, gbs=32, seq_len=2048, zero_stage=0,
                     recompute="none", sequence_parallel=False)
    par = tomllib.loads(emit("torchtitan@0.2", ddp, llama70b).text)["parallelism"]
    assert (par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]) == (8, 1)


def test_torchtitan_fp8_and_selective(llama70b):
    doc = tomllib.loads(emit("torchtitan@0.2", INTERLEAVED_ZERO3_CP, llama70b).text)
    # torchtitan 0.2.2 registers float8 as "quantize.linear.float8"
    # (components/quantization/float8.py register_model_converter)
    assert doc["model"]["converters"] == ["quantize.linear.float8"]
    assert doc["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert not any("grouped GEMMs" in n for n in emit("torchtitan@0.2", INTERLEAVED_ZERO3_CP,
                                                       llama70b).notes)


def test_torchtitan_fp8_moe_says_its_experts_stay_bf16():
    # Float8Linear converts nn.Linear only; the routed experts' grouped GEMMs stay bf16 as
    # costed (Framework.fp8_expert_gemms False), and no grouped-mm converter is written
    qwen = load_model("qwen3-30b-a3b")
    plan = PlanConfig(framework="torchtitan", dp=8, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                      zero_stage=3, precision="fp8", recompute="full")
    r = emit("torchtitan@0.2", plan, qwen)
    assert tomllib.loads(r.text)["model"]["converters"] == ["quantize.linear.float8"]
    assert any("grouped GEMMs stay bf16" in n for n in r.notes)


# --------------------------------------------------------------------------------------------
# DeepSpeed


@pytest.mark.parametrize("config", [ZERO3_NO_PP, GPIPE_ZERO1])
def test_deepspeed_json_round_trip(config, llama70b):
    r = emit("deepspeed", config, llama70b)
    cfg = json.loads(r.text)
    assert cfg["train_batch_size"] == config.gbs
    assert cfg["train_micro_batch_size_per_gpu"] == config.mbs
    assert cfg["gradient_accumulation_steps"] == config.n_micro
    assert cfg["train_batch_size"] == (cfg["train_micro_batch_size_per_gpu"]
                                       * cfg["gradient_accumulation_steps"] * config.dp)
    assert cfg["zero_optimization"]["stage"] == int(config.zero_stage)
    prec = "fp16" if config.precision.value == "fp16" else "bf16"
    # 16-bit gradients, as plan3d costs DeepSpeed (fp32 accumulation is another memory layout)
    assert cfg["data_types"]["grad_accum_dtype"] == prec
    assert cfg[prec]["enabled"] is True
    assert ("activation_checkpointing" in cfg) is (config.recompute.value == "full")
    # TP/PP live in the Megatron-DeepSpeed arguments the notes carry
    [line] = [n for n in r.notes if n.startswith("Megatron-DeepSpeed args: ")]
    a = parse_inline_args(line.removeprefix("Megatron-DeepSpeed args: "))
    assert int(a["--tensor-model-parallel-size"]) == config.tp
    assert int(a["--pipeline-model-parallel-size"]) == config.pp
    assert ("--no-pipeline-parallel" in a) is (config.pp == 1)
    assert int(a["--zero-stage"]) == int(config.zero_stage)
    assert int(a["--global-batch-size"]) == config.gbs
    assert json.loads(json.dumps(cfg)) == cfg


def test_deepspeed_gpipe_note(llama70b):
    r = emit("deepspeed", GPIPE_ZERO1, llama70b)
    assert any("GPipe" in n and "TrainSchedule" in n for n in r.notes)


# --------------------------------------------------------------------------------------------
# What cannot be expressed


@pytest.mark.parametrize("framework,config,words", [
    ("deepspeed", INTERLEAVED, ["deepspeed", "interleaved"]),
    ("deepspeed", GPIPE_ZERO2, ["deepspeed", "ZeRO-2", "pipeline"]),
    ("deepspeed", replace(INTERLEAVED_ZERO3_CP, {"vpp": 1, "schedule": "1f1b",
                                                          "zero_stage": 1}),
     ["deepspeed", "FP8"]),
    ("deepspeed", replace(ZERO3_NO_PP, {"cp": 2, "dp": 32, "gbs": 64}),
     ["deepspeed", "sequence parallel"]),
    ("torchtitan", INTERLEAVED, ["torchtitan", "ZeRO-1"]),
    ("torchtitan", GPIPE_ZERO1, ["torchtitan", "fp16"]),
    ("torchtitan", replace(ZERO3_NO_PP, {"zero_stage": 0}), ["torchtitan", "DDP"]),
    # pp·vpp = 41·4 = 164 chunks > 80 layers + embedding + loss = 82
    ("megatron", replace(INTERLEAVED, {"pp": 41, "vpp": 4, "dp": 1, "tp": 8, "n_micro": 41,
                                       "gbs": 41}),
     ["megatron", "164", "80 layers"]),
    ("nemo", replace(ZERO3_NO_PP, {"cp": 3, "seq_len": 8192, "dp": 64}),
     ["nemo", "seq_len"]),
])
def test_unsupported_raises(framework, config, words, llama70b):
    with pytest.raises(PlanError) as err:
        emit(framework, config, llama70b)
    msg = str(err.value)
    assert "\n" not in msg
    for word in words:
        assert word in msg


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_inconsistent_plans_raise(framework, llama70b):
    with pytest.raises(PlanError, match=rf"^{framework}: .*gbs"):
        emit(framework, replace(INTERLEAVED, {"gbs": 1000}), llama70b)
    with pytest.raises(PlanError, match=rf"^{framework}: .*interleaved"):
        emit(framework, replace(INTERLEAVED, {"schedule": "1f1b"}), llama70b)
    with pytest.raises(PlanError, match=rf"^{framework}: .*pp > 1"):
        emit(framework, replace(ZERO3_NO_PP, {"vpp": 2, "schedule": "interleaved"}),
             llama70b)


def test_unknown_framework_lists_known(llama70b):
    with pytest.raises(PlanError) as err:
        emit("jax", INTERLEAVED, llama70b)
    for name in FRAMEWORKS:
        assert name in str(err.value)
    assert "'jax'" in str(err.value)


# --------------------------------------------------------------------------------------------
# A sweep: every framework either writes parseable text or says why not


PARSE = {
    "args": parse_args,
    "yaml": parse_yaml_subset,
    "toml": tomllib.loads,
    "json": json.loads,
}


def _sweep():
    for tp, pp, vpp, zero, rc, prec, sched in itertools.product(
            (1, 4), (1, 2, 4), (1, 2), (0, 1, 2, 3), ("none", "selective", "full"),
            ("bf16", "fp16", "fp8"), ("gpipe", "1f1b", "interleaved")):
        if vpp > 1 and (pp == 1 or sched != "interleaved"):
            continue
        dp = 2
        yield PlanConfig(dp=dp, tp=tp, pp=pp, vpp=vpp, mbs=1, n_micro=8, gbs=8 * dp,
                         seq_len=4096, zero_stage=zero, recompute=rc, precision=prec,
                         schedule=sched, sequence_parallel=tp > 1)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_sweep_parses_or_explains(framework):
    model = load_model("8b")
    emitted = refused = 0
    for config in _sweep():
        try:
            r = emit(framework, config, model)
        except PlanError as err:
            assert str(err).startswith(f"{framework}: ")
            refused += 1
            continue
        PARSE[r.format](r.text)
        emitted += 1
    assert emitted > 0


def test_megatron_uneven_interleaved_uses_the_pipeline_layout(llama70b):
    # 80 layers in pp·vpp = 3·2 = 6 chunks: 80 = 13·6 + 2, so chunks 0 and 1 hold 14 layers and
    # the other four 13; chunk k runs on rank k mod 3: rank 0 holds chunks 0 and 3 (14 + 13 = 27),
    # rank 1 chunks 1 and 4 (27), rank 2 chunks 2 and 5 (26) — no rank above ⌈80/3⌉ = 27
    plan = replace(INTERLEAVED, {"pp": 3, "dp": 16, "tp": 8, "gbs": 1536, "n_micro": 96})
    a = parse_args(emit("megatron", plan, llama70b).text)
    layout = a["--pipeline-model-parallel-layout"].split("|")
    assert [c.count("t") for c in layout] == [14, 14, 13, 13, 13, 13]
    assert layout[0].startswith("E") and layout[-1].endswith("L")
    assert "--num-virtual-stages-per-pipeline-rank" not in a
    per_rank = [sum(layout[k].count("t") for k in range(r, 6, 3)) for r in range(3)]
    assert per_rank == [27, 27, 26]


def test_megatron_embedding_and_loss_as_chunks_of_their_own():
    # Llama 3.1 405B: 126 layers in pp·vpp = 16·8 = 128 chunks (a published layout): the
    # embedding and the loss stand alone, every other chunk holds one layer
    model = load_model("405b")
    plan = PlanConfig(dp=8, tp=8, pp=16, vpp=8, mbs=1, n_micro=32, gbs=256, seq_len=8192,
                      zero_stage=1, recompute="selective", sequence_parallel=True,
                      schedule="interleaved")
    layout = parse_args(emit("megatron", plan, model).text)["--pipeline-model-parallel-layout"]
    chunks = layout.split("|")
    assert len(chunks) == 128 and chunks[0] == "E" and chunks[-1] == "L"
    assert chunks[1:-1] == ["t"] * 126
    yaml_text = emit("nemo", plan, model).text
    assert "pipeline_model_parallel_layout" in yaml_text
