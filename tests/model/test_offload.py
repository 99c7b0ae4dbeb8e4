"""Offload to host memory (issue 15, item 3): hand-derived cases, a sympy identity, properties,
the frameworks' rules and launch settings, the CLI and the search."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from planner.catalog import hardware_presets, load_hardware, load_model
from planner.cli import app
from planner.errors import NoFeasiblePlan, PlanError
from planner.formulas import offload as OF
from planner.frameworks.emit import emit
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.ranking import DEFAULT_HEADROOM
from planner.search.request import PlanRequest

PROFILES = Path(__file__).resolve().parents[2] / "hardware_profiles"
GB = 1e9


@pytest.fixture(scope="module")
def llama70b():
    return load_model("70b")


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-nvlink")


# 70B on 64 H100: dp8 tp8 pp1, ZeRO-1 (the distributed optimizer), 512 × 8,192 tokens
BASE = dict(dp=8, tp=8, pp=1, mbs=1, n_micro=64, gbs=512, seq_len=8192, zero_stage=1)


# ---- the profiles ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(hardware_presets()))
def test_every_profile_has_a_sourced_host_section(name):
    """Every profile says what a GPU gets of its host, each number with a comment above it."""
    hw = load_hardware(name)
    assert hw.host is not None
    assert 16 <= hw.host.memory_gib <= 1024  # GiB per GPU
    assert 10 <= hw.host.link_gb_per_s <= 450  # PCIe Gen4 x16 … NVLink-C2C per direction
    assert 10 <= hw.host.dram_gb_per_s <= 512
    lines = (PROFILES / f"{name}.toml").read_text().splitlines()
    start = lines.index("[host]")
    section = lines[start + 1:]
    ends = [i for i, line in enumerate(section) if line.startswith("[")]
    section = section[:ends[0]] if ends else section  # up to the next section
    keys = [i for i, line in enumerate(section) if re.match(r"^\w+\s*=", line)]
    assert {section[i].split("=")[0].strip() for i in keys} == {
        "memory_gib", "link_gb_per_s", "dram_gb_per_s", "nic_shares_link"}
    previous = -1
    for i in keys:  # at least one comment line between a key and the one before it
        assert any(line.lstrip().startswith("#") for line in section[previous + 1:i]), (
            f"{name}: [host] {section[i]} has no source comment")
        previous = i


# ---- hand-derived ------------------------------------------------------------------------------

def test_optimizer_fully_offloaded_hand(llama70b, h100):
    """Llama 3.1 70B at tp8 pp1 holds Ψ_gpu per GPU: 80 layers of (h·d_h·(2a + 2k) + 3·h·f)/t =
    (8192·128·144 + 3·8192·28672)/8 = 106,954,752, 80 × that = 8,556,380,160; the layers' norms
    80·2·8192 = 1,310,720; embedding and head, V padded to 129,024 (126·1024), 2·129,024·8192/8 =
    264,241,152; the final norm 8,192: Ψ_gpu = 8,821,940,224. ZeRO-1 over d = 8: the optimizer
    (fp32 master, m, v) is 12·Ψ_gpu/8 = 13,232,910,336 B, all of which leaves the GPU; the host
    holds it and Megatron's fp32 gradient copy, 16·Ψ_gpu/8 = 17,643,880,448 B."""
    plain = estimate(llama70b, h100, PlanConfig(**BASE))
    off = estimate(llama70b, h100, PlanConfig(**BASE, offload_optimizer=1.0))
    assert plain.memory.params_per_gpu == 8_821_940_224
    assert plain.memory.total_bytes - off.memory.total_bytes == pytest.approx(13_232_910_336,
                                                                              rel=1e-12)
    assert off.memory.optimizer_bytes == 0
    assert off.memory.host_bytes == pytest.approx(17_643_880_448, rel=1e-12)
    assert off.memory.host_capacity_bytes == pytest.approx(232.8 * 2**30)
    # time: the CPU's Adam over Ψ_gpu/8 = 1,102,742,528 parameters at 28 B each over the GPU's
    # 57.6 GB/s of DRAM; the copies (4 B gradients down, 2 B weights up at min(35.2, 57.6) GB/s:
    # 0.1253 s, 0.0627 s) run beside it (Megatron's overlap flag) and stream through the same
    # DRAM, as does the host's fp32 → bf16 conversion before the copy up (6 B): the DRAM moves
    # (28 + 4 + 2 + 6) = 40 B per parameter, 0.76579 s, the longest of the three. The step gains
    # that and loses the GPU's Adam, (4 + 24 + 2)·1,102,742,528 B at 3.35 TB/s · 0.89: 0.011096 s
    dram_s = 1_102_742_528 * 40 / 57.6e9
    assert off.time.offload_s == pytest.approx(dram_s, rel=1e-9)
    assert off.time.optimizer_s == 0
    gpu_adam_s = 30 * 1_102_742_528 / (3.35e12 * 0.89)
    assert off.time.step_s - plain.time.step_s == pytest.approx(dram_s - gpu_adam_s, rel=1e-6)
    assert off.time.offload_d2h_bytes == pytest.approx(4 * 1_102_742_528)
    assert off.time.offload_h2d_bytes == pytest.approx(2 * 1_102_742_528)


def test_half_the_optimizer_hand(llama70b, h100):
    """f = 0.5 moves half of the 13,232,910,336 B: 6,616,455,168 B, and the host holds half of
    17,643,880,448 B."""
    plain = estimate(llama70b, h100, PlanConfig(**BASE))
    half = estimate(llama70b, h100, PlanConfig(**BASE, offload_optimizer=0.5))
    assert plain.memory.total_bytes - half.memory.total_bytes == pytest.approx(6_616_455_168)
    assert half.memory.host_bytes == pytest.approx(8_821_940_224)


def test_activation_offload_hand(llama70b, h100):
    """Ten layers' activations to the host: the device's activations fall by 10·A_layer and the
    host holds them (pp = 1: one micro-batch in flight); each micro-batch copies 10·A_layer down in
    the forward and up in the backward."""
    config = dict(BASE, recompute="none")
    plain = estimate(llama70b, h100, PlanConfig(**config))
    off = estimate(llama70b, h100, PlanConfig(**config, offload_activations=10))
    layer = [t.value for t in _explain(llama70b, h100, PlanConfig(**config)).terms
             if t.key == "layer_activation_bytes"][0]
    assert plain.memory.activations_bytes - off.memory.activations_bytes == pytest.approx(
        10 * layer)
    assert off.memory.host_bytes == pytest.approx(10 * layer)
    assert off.time.offload_d2h_bytes == pytest.approx(64 * 10 * layer)  # m = 64 micro-batches


def _explain(model, hw, config):
    from planner.model.explain import explain

    return explain(model, hw, config)


def test_parameter_offload_fsdp2_hand(llama70b, h100):
    """torchtitan ZeRO-3 (FSDP2) keeps fp32 weights, fp32 gradients and fp32 m, v sharded:
    16·Ψ_gpu/d. With CPUOffloadPolicy all of it lives on the host and none on the GPU."""
    config = dict(BASE, zero_stage=3, framework="torchtitan")
    plain = estimate(llama70b, h100, PlanConfig(**config))
    off = estimate(llama70b, h100, PlanConfig(**config, offload_optimizer=1, offload_params=True))
    states = (plain.memory.weights_bytes + plain.memory.gradients_bytes
              + plain.memory.optimizer_bytes)
    assert states == pytest.approx(16 * 8_821_940_224 / 8)
    assert off.memory.weights_bytes == off.memory.gradients_bytes == 0
    assert off.memory.optimizer_bytes == 0
    assert off.memory.host_bytes == pytest.approx(states)
    assert plain.memory.total_bytes - off.memory.total_bytes == pytest.approx(states)


def test_link_time_takes_the_narrower_of_link_and_dram():
    assert OF.link_time_s(52.8e9, 52.8e9, 57.6e9) == pytest.approx(1.0)
    assert OF.link_time_s(38.4e9, 52.8e9, 38.4e9) == pytest.approx(1.0)


def test_least_offload_that_fits():
    # 6.1 GB over with 12.2 GB of optimizer state: f = 0.5 exactly, on the 0.05 grid 0.5; 6.2 GB
    # over: 0.508 → 0.55. 10 GB over with 4 GB of activations per layer and 25 % allocator slack
    # (5 GB freed per layer): 2 layers; 10.5 GB over: 3
    assert OF.min_offload_fraction(6.1e9, 12.2e9) == pytest.approx(0.5)
    assert OF.min_offload_fraction(6.2e9, 12.2e9) == pytest.approx(0.55)
    assert OF.min_offload_layers(10e9, 4e9, 0.25) == 2
    assert OF.min_offload_layers(10.5e9, 4e9, 0.25) == 3


def test_optimizer_step_offload_forms():
    # pipelined: the slowest of the three; serial: copies down under the backward (2 s of
    # window hides 1.5 s), then the CPU step, then the copies up
    assert OF.optimizer_step_offload_s(1.5, 3.0, 0.5, 2.0, 1) == 3.0
    assert OF.optimizer_step_offload_s(1.5, 3.0, 0.5, 2.0, 0) == 3.5
    assert OF.optimizer_step_offload_s(2.5, 3.0, 0.5, 2.0, 0) == pytest.approx(4.0)


# ---- a sympy identity and properties -----------------------------------------------------------

def test_fraction_zero_is_the_plan_without_offload(llama70b, h100):
    """With the fraction f and the activation layers N symbols, the offload expressions at
    f = N = 0 are exactly (to the last bit: the difference is sympy's 0) the plan without
    offload: device memory by part, the optimizer step, the step time; no host bytes, no time."""
    from dataclasses import replace

    config = PlanConfig(**BASE)
    x = numbers(llama70b, h100, config)
    f, n = sp.symbols("f_o N_off", nonnegative=True)
    xs = SimpleNamespace(**{**vars(x), "offload_optimizer": f, "offload_activations": n})
    plain = plan_costs(x, Choices.of(config))
    symbolic = plan_costs(xs, replace(Choices.of(config), offload=True))
    for key in ("total_bytes", "weights_bytes", "gradients_bytes", "optimizer_bytes",
                "activations_bytes", "optimizer_s", "step_s", "host_bytes", "offload_s"):
        # doit(): the NCCL pick is an unevaluated n-ary Min (_ops.smallest) until evaluated
        assert sp.sympify(symbolic[key]).subs({f: 0, n: 0}).doit() - sp.sympify(plain[key]) == 0, key
    # not vacuous: f and N are in them, and M falls by exactly M_opt per unit of f
    assert {f, n} <= sp.sympify(symbolic["total_bytes"]).free_symbols
    assert sp.diff(symbolic["total_bytes"], f) + plain["optimizer_bytes"] == 0


@settings(max_examples=25, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1))
def test_device_bytes_fall_and_host_bytes_rise_with_the_fraction(a, b):
    model, hw = load_model("70b"), load_hardware("h100-nvlink")
    lo, hi = sorted((a, b))
    p_lo = estimate(model, hw, PlanConfig(**BASE, offload_optimizer=lo))
    p_hi = estimate(model, hw, PlanConfig(**BASE, offload_optimizer=hi))
    assert p_hi.memory.total_bytes <= p_lo.memory.total_bytes
    assert p_hi.memory.host_bytes >= p_lo.memory.host_bytes
    assert p_hi.time.step_s >= p_lo.time.step_s - 1e-12  # offload never speeds a step up


def test_default_plans_are_unchanged(llama70b, h100):
    """The offload fields' defaults leave a plan's costs as they were (no host bytes, no time)."""
    p = estimate(llama70b, h100, PlanConfig(**BASE))
    assert p.memory.host_bytes == 0 and p.time.offload_s == 0
    assert p.config.short_label() == "dp8 tp8 pp1 z1 sel"


def test_labels():
    assert PlanConfig(**BASE, offload_optimizer=0.5).short_label().endswith(" off0.5")
    assert PlanConfig(**(BASE | dict(zero_stage=3)), offload_optimizer=1,
                      offload_params=True).short_label().endswith(" offp")
    assert "offa4" in PlanConfig(**BASE, offload_activations=4).label()


def test_params_without_whole_optimizer_is_refused():
    with pytest.raises(ValueError, match="offload_optimizer must be 1"):
        PlanConfig(**BASE, offload_params=True, offload_optimizer=0.5)


# ---- the frameworks ----------------------------------------------------------------------------

@pytest.mark.parametrize("config, says", [
    (dict(offload_optimizer=1, offload_params=True), "no parameter offload"),
    (dict(zero_stage=0, offload_optimizer=0.5), "distributed optimizer"),
    (dict(zero_stage=3, offload_optimizer=0.5), "use --zero 1"),
    (dict(pp=2, dp=4, n_micro=128, offload_activations=4, recompute="none"), "without pipeline parallelism"),
    (dict(offload_activations=4), "without recomputation"),  # selective recompute
    (dict(offload_activations=80, recompute="none"), "must be below the 80 layers"),
    (dict(framework="deepspeed", zero_stage=1, offload_optimizer=0.5), "only with ZeRO-3"),
    (dict(framework="deepspeed", zero_stage=0, offload_optimizer=1), "needs ZeRO 1, 2 or 3"),
    (dict(framework="deepspeed", zero_stage=2, offload_optimizer=1, offload_params=True),
     "valid only with ZeRO stage 3"),
    (dict(framework="deepspeed", offload_activations=2, recompute="none"), "cpu_checkpointing"),
    (dict(framework="torchtitan", zero_stage=3, offload_optimizer=1), "together"),
    (dict(framework="torchtitan", zero_stage=3, offload_activations=2), "no activation offload"),
])
def test_framework_refuses_what_it_does_not_run(llama70b, h100, config, says):
    with pytest.raises(PlanError, match=says):
        estimate(llama70b, h100, PlanConfig(**(BASE | config)))


def test_profile_without_host_refuses_offload(llama70b, h100):
    bare = h100.model_copy(update={"host": None})
    estimate(llama70b, bare, PlanConfig(**BASE))  # no offload: fine
    with pytest.raises(PlanError, match=r"no \[host\] section"):
        estimate(llama70b, bare, PlanConfig(**BASE, offload_optimizer=0.5))


def test_emit_megatron(llama70b):
    args = emit("megatron", PlanConfig(**BASE, offload_optimizer=0.5), llama70b).text
    for flag in ("--optimizer-cpu-offload", "--optimizer-offload-fraction 0.5",
                 "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d"):
        assert flag in args
    acts = emit("megatron", PlanConfig(**BASE, recompute="none", offload_activations=6),
                llama70b).text
    assert "--cpu-offloading-num-layers 6" in acts
    assert "--optimizer-cpu-offload" not in emit("megatron", PlanConfig(**BASE), llama70b).text


def test_emit_nemo(llama70b):
    import yaml

    doc = yaml.safe_load(emit("nemo", PlanConfig(**BASE, offload_optimizer=0.25,
                                                 offload_activations=0), llama70b).text)
    assert doc["optimizer"]["optimizer_cpu_offload"] is True
    assert doc["optimizer"]["optimizer_offload_fraction"] == 0.25
    assert doc["optimizer"]["use_precision_aware_optimizer"] is True
    doc = yaml.safe_load(emit("nemo", PlanConfig(**(BASE | dict(recompute="none")),
                                                 offload_activations=6), llama70b).text)
    assert doc["model"]["cpu_offloading"] is True
    assert doc["model"]["cpu_offloading_num_layers"] == 6
    assert "optimizer_cpu_offload" not in doc["optimizer"]


def test_emit_deepspeed(llama70b):
    cfg = json.loads(emit("deepspeed", PlanConfig(**(BASE | dict(framework="deepspeed", zero_stage=3)),
                                                  offload_optimizer=0.4), llama70b).text)
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True,
                                                             "ratio": 0.4}
    assert "offload_param" not in cfg["zero_optimization"]
    cfg = json.loads(emit("deepspeed", PlanConfig(**(BASE | dict(framework="deepspeed", zero_stage=3)),
                                                  offload_optimizer=1, offload_params=True),
                          llama70b).text)
    assert cfg["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert "ratio" not in cfg["zero_optimization"]["offload_optimizer"]
    with pytest.raises(PlanError, match="only with ZeRO-3"):
        emit("deepspeed", PlanConfig(**BASE, framework="deepspeed", offload_optimizer=0.4),
             llama70b)


def test_emit_torchtitan(llama70b):
    text = emit("torchtitan@0.2", PlanConfig(**(BASE | dict(framework="torchtitan", zero_stage=3)),
                                         offload_optimizer=1, offload_params=True),
                llama70b).text
    assert tomllib.loads(text)["training"]["enable_cpu_offload"] is True
    with pytest.raises(PlanError, match="together"):
        emit("torchtitan@0.2", PlanConfig(**(BASE | dict(framework="torchtitan", zero_stage=3)),
                                      offload_optimizer=1), llama70b)


# ---- the command line --------------------------------------------------------------------------

runner = CliRunner()


def test_cli_explain_shows_each_offload_term(monkeypatch):
    monkeypatch.setenv("PLAN3D_NO_CACHE", "1")
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "64", "--hw", "h100-nvlink",
                            "--tp", "8", "--gbs", "512", "--offload-optimizer", "1",
                            "--section", "memory,time"])
    assert r.exit_code == 0, r.output
    assert "Offloaded to host memory" in r.output
    for symbol in ("M_host", "T_cpu", "T_off,step", "T_off"):
        assert re.search(rf"^\s*{re.escape(symbol)}\s", r.output, re.M), symbol
    assert "f_o" in r.output  # the fraction appears in the formulas
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "64", "--tp", "8",
                            "--gbs", "512", "--offload-optimizer", "1", "--json"])
    data = json.loads(r.output)
    assert data["config"]["offload_optimizer"] == 1
    assert data["memory"]["host_bytes"] > 0 and data["time"]["offload_s"] > 0


@pytest.mark.parametrize("args, says", [
    (["--offload-optimizer", "1.5"], "--offload-optimizer"),
    (["--offload-params"], "no parameter offload"),
    (["--offload-params", "--offload-optimizer", "0.5"], "must be 1"),
])
def test_cli_bad_offload_is_one_line(args, says):
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "64", "--tp", "8",
                            "--gbs", "512", *args])
    assert r.exit_code == 2
    assert says in r.output and "Traceback" not in r.output


def test_cli_search_offload_mode_is_checked():
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "64", "--offload", "always"])
    assert r.exit_code == 2 and "--offload takes fit" in r.output


# ---- the search --------------------------------------------------------------------------------

def test_search_offloads_only_what_does_not_fit_without_it():
    """405B on 64 H100 at tp8 pp8 fits nowhere without offload (ZeRO-1 over one data-parallel
    rank keeps all 18 B/param: 18·405e9/64 ≈ 106 GiB): the default search (--offload fit)
    admits offload, the least that fits each plan; `--offload none` finds nothing. 70B on 512
    GPUs fits without it: no plan offloads."""
    model, hw = load_model("405b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=64, tp=[8], pp=[8], cp=[1], mbs=[1])
    with pytest.raises(NoFeasiblePlan):
        search(model, hw, req.model_copy(update={"offload": "none"}), top=3)
    result = search(model, hw, req, top=3)
    assert result.plans
    for plan in result.plans:
        c = plan.config
        assert c.offload and plan.memory.fits
        assert plan.memory.total_bytes <= hw.capacity_bytes
        assert plan.memory.host_bytes <= hw.host.memory_bytes
        # the least on the 0.05 grid that fits with the memory margin a recommended plan
        # leaves (planner.search.ranking.DEFAULT_HEADROOM: issue 19), not just in capacity
        if 0 < c.offload_optimizer < 1 and not c.offload_params:
            less = c.model_copy(update={"offload_optimizer": round(c.offload_optimizer - 0.05,
                                                                   6)})
            assert estimate(model, hw, less).memory.total_bytes > (
                hw.capacity_bytes * (1 - DEFAULT_HEADROOM))
    small = search(load_model("70b"), hw, PlanRequest(gpus=512), top=5)
    assert not any(p.config.offload for p in small.plans)


def test_search_auto_competes_on_speed_and_fixed_offload_applies_to_all():
    """--offload auto admits offload for the plans that do not fit without it, beside the plans
    that fit (so the space only grows); a fixed --offload-optimizer applies to every plan."""
    model, hw = load_model("70b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=64, tp=[8], pp=[1, 2], cp=[1], mbs=[1])
    plain = search(model, hw, req.model_copy(update={"offload": "none"}), top=50)
    auto = search(model, hw, req.model_copy(update={"offload": "auto"}), top=50)
    assert auto.feasible >= plain.feasible and auto.considered >= plain.considered
    fixed = search(model, hw, req.model_copy(update={"offload_optimizer": 0.5, "zero": [1]}),
                   top=3)
    assert all(p.config.offload_optimizer == 0.5 for p in fixed.plans)
    # the framework's offload rules hold in the search too: activation offload only at pp 1
    # without recompute; torchtitan has no optimizer-only offload
    acts = search(model, hw, req.model_copy(update={"offload_activations": 4}), top=5)
    assert all(p.config.pp == 1 and p.config.recompute.value == "none"
               and p.config.offload_activations == 4 for p in acts.plans)
    with pytest.raises(NoFeasiblePlan):
        search(model, hw, req.model_copy(update={"offload_optimizer": 0.5,
                                                 "framework": "torchtitan"}), top=1)


def test_search_auto_admits_offload_that_runs_faster():
    """405B on 1,024 H100 (pp 1): without offload the fastest plans recompute or pipeline; with
    `--offload auto` a plan that keeps every activation (no recompute) and holds most layers'
    activations on the host fits and steps faster — the copies (host link at 35.2 GB/s, shared
    with the NIC) cost less than the recomputation or the bubble they replace. `--offload fit`
    (the default) keeps the plans that fit without offload."""
    model, hw = load_model("405b"), load_hardware("h100-nvlink")
    req = PlanRequest(gpus=1024, pp=[1])
    plain = search(model, hw, req.model_copy(update={"offload": "none"}), top=1).plans[0]
    default = search(model, hw, req, top=1).plans[0]
    auto = search(model, hw, req.model_copy(update={"offload": "auto"}), top=1).plans[0]
    assert not plain.config.offload and default.config == plain.config
    assert auto.config.offload_activations > 0 and auto.config.recompute.value == "none"
    assert auto.time.step_s < plain.time.step_s and auto.memory.fits
    assert auto.time.offload_s > 0  # what the copies add is counted, not hidden


# ---- a published run, as a test of generality (nothing fitted to it) ---------------------------

def _gpt(name: str, layers: int, hidden: int):
    """A GPT-2-style model as ZeRO-Offload trains it (Ren et al. 2021 §6: GPT-2 architecture,
    hidden 4096 for the multi-billion models, sequence 1024, vocabulary 50,257)."""
    from planner.schema import ModelSpec

    return ModelSpec(name=name, n_layers=layers, hidden=hidden, n_heads=32, ffn=4 * hidden,
                     vocab=50257, seq_len=1024, mlp="gelu", norm="layernorm", bias=True,
                     position_embedding="learned", tied_embeddings=True)


def test_zero_offload_trains_10b_on_one_v100():
    """ZeRO-Offload (Ren et al. 2021, abstract and §6.2.1): a 10B-parameter GPT-2 trains on one
    32 GB V100 (DGX-2), where PyTorch alone stops at 1.4B. The memory model agrees without a
    number fitted to the paper: DeepSpeed ZeRO-2 on one GPU with the optimizer (and with it the
    gradient partition) on the host fits 10B in 32 GB — it holds the 16-bit weights, 2·10e9 B =
    18.7 GiB, the reduce buckets and checkpointed activations — and does not fit without offload
    (18 B/param: 168 GiB); twice the size (20B, 37 GiB of weights alone) fits in neither.
    The V100: nvidia-smi reports 32,510 MiB on a V100 32 GB (31.75 GiB); the DGX-2 host has
    1.5 TB of memory, all of it the one GPU's here; PCIe Gen3 x16 ~12 GB/s measured
    (ZaidQureshi/bam#54). Only memory is asserted: the paper's batch for this run is not given,
    so its 40 TFLOP/s is not a check of the time model."""
    from planner.schema import Host

    v100 = load_hardware("a100-nvlink").model_copy(update={
        "name": "v100-dgx2", "hbm_gib": 31.75,
        "host": Host(memory_gib=1.5e12 / 2**30, link_gb_per_s=12.0, dram_gb_per_s=192.0)})
    model = _gpt("gpt2-10b", 50, 4096)  # 12·L·h² = 12·50·4096² = 10.07e9
    assert model.n_params == pytest.approx(10.3e9, rel=0.01)  # + embeddings, biases, norms
    config = dict(dp=1, mbs=1, n_micro=1, gbs=1, seq_len=1024, zero_stage=2, recompute="full",
                  precision="fp16", grad_dtype="bf16", sequence_parallel=False,
                  framework="deepspeed")
    plain = estimate(model, v100, PlanConfig(**config))
    off = estimate(model, v100, PlanConfig(**config, offload_optimizer=1))
    assert not plain.memory.fits and off.memory.fits
    assert off.memory.gradients_bytes == 0 and off.memory.optimizer_bytes == 0
    big = estimate(_gpt("gpt2-20b", 100, 4096), v100, PlanConfig(**config, offload_optimizer=1))
    assert not big.memory.fits
