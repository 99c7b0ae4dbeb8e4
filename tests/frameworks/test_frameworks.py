"""Plans for a framework: what each runs, how it lays the model states out, and that the search
ranks only what its framework runs (planner/frameworks/)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.errors import PlanError
from planner.formulas import memory as M
from planner.formulas import params as P
from planner.formulas.choices import ZeroStage
from planner.frameworks import FRAMEWORKS, get
from planner.frameworks.emit import emit
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.request import PlanRequest

H100 = load_hardware("h100-nvlink")
GIB = 2**30


def states_bytes(framework: str, zero: int, grad_bytes: float, psi: float, d: int) -> float:
    s = get(framework).memory.states(ZeroStage(zero), grad_bytes)
    return (M.state_bytes(psi, s.weight_bytes, d, s.weight_sharded)
            + M.state_bytes(psi, s.grad_bytes, d, s.grad_sharded)
            + M.state_bytes(psi, s.optimizer_bytes, d, s.optimizer_sharded))


@pytest.mark.parametrize("framework, zero, grad_bytes, expected", [
    # Megatron-Core (theoretical_memory_usage.py): 18 B/param without the distributed optimizer,
    # 6 + 12/d with it: Ψ = 1e9, d = 8 → 18e9; 6e9 + 1.5e9 = 7.5e9
    ("megatron", 0, 4, 18e9),
    ("megatron", 1, 4, 7.5e9),
    # --grad-reduce-in-bf16: a 16-bit main_grad buffer, 2 + 2 + 12/8 = 5.5
    ("megatron", 1, 2, 5.5e9),
    # Megatron-FSDP optim_grads_params: every state sharded, (2 + 4 + 12)/8 = 2.25
    ("megatron", 3, 4, 2.25e9),
    # torchtitan FSDP2: fp32 params + fp32 grads + Adam m, v = 16 B/param, all sharded: 16/8 = 2
    ("torchtitan", 3, 4, 2.0e9),
    ("torchtitan", 2, 4, 2.0e9),
    # torchtitan DDP: the same 16 B on every rank
    ("torchtitan", 0, 4, 16e9),
    # DeepSpeed ZeRO-2: 16-bit weights whole, then 2 (16-bit grad partition) + 4 (its fp32 copy in
    # step()) + 12 sharded: 2 + 18/8 = 4.25
    ("deepspeed", 2, 2, 4.25e9),
    # ZeRO-3: 2 + 2 + 4 + 12 = 20 sharded: 2.5
    ("deepspeed", 3, 2, 2.5e9),
    # ZeRO-1 with bf16 gradients: 2 + 2 whole, 16 sharded: 4 + 2 = 6
    ("deepspeed", 1, 2, 6.0e9),
])
def test_model_states_per_framework(framework, zero, grad_bytes, expected):
    assert states_bytes(framework, zero, grad_bytes, 1e9, 8) == pytest.approx(expected)


def test_torchtitan_fsdp_holds_16_bytes_over_d_through_the_cost_model():
    # Llama 3.1 8B, FSDP over 8 ranks, one stage: weights + gradients + optimizer = 16·Ψ/8
    model = load_model("8b")
    config = PlanConfig(dp=8, tp=1, pp=1, mbs=2, n_micro=1, gbs=16, seq_len=8192, zero_stage=3,
                        recompute="selective", sequence_parallel=False, framework="torchtitan")
    m = estimate(model, H100, config).memory
    states = m.weights_bytes + m.gradients_bytes + m.optimizer_bytes
    assert states == pytest.approx(16 * m.params_per_gpu / 8)
    # torchtitan reduces and keeps gradients in fp32 whatever --grad-dtype says
    bf16 = PlanConfig(**{**config.model_dump(), "grad_dtype": "bf16"})
    assert estimate(model, H100, bf16).memory.gradients_bytes == m.gradients_bytes


def test_fsdp2_under_pp_holds_the_stage_unsharded():
    # torchtitan, Llama 3.1 70B, FSDP 8 × PP 4 (1F1B): besides the sharded 16·Ψ_s/8, each GPU holds
    # the stage's bf16 weights (2·Ψ_s, gathered and kept: reshard_after_forward off under PP) and
    # its fp32 gradients accumulated unsharded (4·Ψ_s, gradient sync off until the last
    # micro-batch), plus one layer's fp32 reduce-scatter input and its ends (embedding or head)
    # in bf16; the same plan at pp = 1 holds two gathered layers instead of 2·Ψ_s
    model = load_model("70b")
    config = PlanConfig(dp=8, tp=1, pp=4, mbs=1, n_micro=16, gbs=128, seq_len=8192, zero_stage=3,
                        recompute="full", sequence_parallel=False, framework="torchtitan")
    r = plan_costs(numbers(model, H100, config), Choices.of(config))
    psi = float(r["stage_params"])
    layer = M.layer_gpu_params(
        P.layer_sharded_params(model.hidden, model.n_heads, model.kv_heads, model.dim_head,
                               model.ffn, 3, 0), P.layer_replicated_params(model.hidden, 0, 1), 1)
    end = float(r["vocab_padded"]) * model.hidden
    held = 2 * psi + 4 * psi + 4 * layer + 2 * end
    states = 16 * psi / 8
    # PyTorch's GEMM workspaces come from the caching allocator too: two threads (main,
    # autograd) × (32 MiB cuBLAS on sm90 + 1 MiB cuBLASLt) = 66 MiB (formulas/runtime.py)
    workspaces = 2 * (32 + 1) * 2**20
    assert float(r["allocated_bytes"]) == pytest.approx(states + float(r["activations_bytes"])
                                                        + held + workspaces, rel=1e-12)


def test_megatron_fullest_gpu_is_ceil_l_over_p_and_torchtitan_cuts_even_chunks():
    # Llama 3.1 405B, 126 layers, pp = 8, vpp = 5 (40 chunks): Megatron's pipeline layout puts
    # ⌈126/8⌉ = 16 layers on the fullest GPU; torchtitan's equal chunks of ⌈126/40⌉ = 4 give
    # 5·4 = 20
    model = load_model("405b")
    base = dict(dp=8, tp=8, pp=8, vpp=5, mbs=1, n_micro=64, gbs=512, seq_len=8192,
                recompute="full", schedule="interleaved")
    megatron = estimate(model, H100, PlanConfig(**base, zero_stage=1)).memory
    titan = estimate(model, H100, PlanConfig(**base, zero_stage=3, framework="torchtitan")).memory
    assert (megatron.stage_layers, titan.stage_layers) == (16, 20)


def test_the_published_405b_layout_with_embedding_and_loss_as_chunks_is_a_megatron_plan():
    # pp·vpp = 16·8 = 128 chunks for 126 layers (Megatron's --pipeline-model-parallel-layout with
    # E and L alone): accepted, one layer per chunk, 8 per GPU
    model = load_model("405b")
    config = PlanConfig(dp=8, tp=8, pp=16, vpp=8, mbs=1, n_micro=64, gbs=512, seq_len=8192,
                        zero_stage=1, recompute="full", schedule="interleaved")
    assert estimate(model, H100, config).memory.stage_layers == 8
    deepspeed = PlanConfig(**{**config.model_dump(), "framework": "deepspeed"})
    with pytest.raises(PlanError, match="deepspeed"):
        estimate(model, H100, deepspeed)


@pytest.mark.parametrize("framework, config, words", [
    ("megatron", dict(pp=4, zero_stage=2), ["Megatron-FSDP", "PP"]),
    ("megatron", dict(pp=4, schedule="gpipe"), ["GPipe"]),
    ("torchtitan", dict(zero_stage=1), ["ZeRO-1"]),
    ("torchtitan", dict(zero_stage=0, tp=8, dp=8), ["DDP"]),
    ("torchtitan", dict(zero_stage=3, precision="fp16"), ["fp16"]),
    ("deepspeed", dict(pp=4, zero_stage=3), ["ZeRO-3", "pipeline"]),
    ("deepspeed", dict(pp=4, vpp=2, schedule="interleaved"), ["1F1B"]),
    ("deepspeed", dict(cp=2, dp=32, tp=1, sequence_parallel=False, precision="fp8"), ["FP8"]),
])
def test_each_framework_refuses_what_it_does_not_run(framework, config, words):
    model = load_model("70b")
    base = dict(dp=16 if config.get("pp", 1) == 4 else 64, tp=1, pp=1, mbs=1, n_micro=8,
                seq_len=8192, zero_stage=1, recompute="full", sequence_parallel=False,
                framework=framework)
    base.update(config)
    base["gbs"] = base["dp"] * base["mbs"] * base["n_micro"]
    with pytest.raises(PlanError) as err:
        estimate(model, H100, PlanConfig(**base))
    assert str(err.value).startswith(framework + ":")
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("framework, fmt", [("megatron", "megatron"), ("megatron", "nemo"),
                                            ("torchtitan", "torchtitan"),
                                            ("deepspeed", "deepspeed")])
def test_the_search_ranks_only_plans_its_framework_runs_and_emits(framework, fmt):
    # 70B on 512 H100: every plan of the first 40 is one the framework's rules admit and its
    # launch settings express without refusal
    model = load_model("70b")
    result = search(model, H100, PlanRequest(gpus=512, framework=framework), top=40)
    assert result.plans
    fw = FRAMEWORKS[framework]
    for plan in result.plans:
        c = plan.config
        assert c.framework == framework
        assert c.zero_stage in fw.zero_stages and (c.pp == 1 or c.schedule in fw.schedules)
        emit(fmt, c, model)  # raises PlanError if the framework cannot express it
    if framework == "megatron":
        assert not any(p.config.pp > 1 and p.config.zero_stage >= 2 for p in result.plans)
    if framework == "deepspeed":
        assert all(p.config.vpp == 1 for p in result.plans)
    if framework == "torchtitan":
        assert not any(p.config.zero_stage == 1 for p in result.plans)


def test_search_constraints_list_the_framework_rules():
    r = search(load_model("8b"), H100, PlanRequest(gpus=64, framework="deepspeed"), top=1)
    assert any(text.startswith("deepspeed: pipeline parallelism only with ZeRO 0 or 1")
               for text in r.constraints)


runner = CliRunner()


def test_emit_implies_its_framework_and_a_conflict_is_one_line():
    r = runner.invoke(app, ["explain", "-m", "8b", "-n", "8", "--zero", "3", "--emit",
                            "torchtitan", "--json"])
    assert r.exit_code == 0, r.output
    assert '"framework": "torchtitan"' in r.stdout
    r = runner.invoke(app, ["explain", "-m", "8b", "-n", "8", "--zero", "3", "--emit",
                            "torchtitan", "--framework", "megatron"])
    assert r.exit_code == 2
    assert "--emit torchtitan writes torchtitan settings, but --framework is megatron" in r.output
    r = runner.invoke(app, ["search", "-m", "8b", "-n", "8", "--framework", "jax"])
    assert r.exit_code == 2 and "unknown framework 'jax'" in r.output


def test_nemo_and_megatron_bridge_name_megatron():
    assert get("nemo") is get("megatron") is get("Megatron-Bridge")


def test_fp8_under_megatron_holds_what_transformer_engine_holds():
    # GPT-3 175B, tp 4, pp 8, fp8 vs bf16 (one layout): Transformer Engine caches an fp8 copy of
    # each linear weight and of its transpose (2 B per layer parameter on the GPU) and keeps the
    # linear layers' saved inputs in 1 byte: per layer s·b·(2h/t + a·d_h/t + f/t) bytes fewer
    # = 2048·1·(2·12288 + 12288 + 49152)/4 = 44,040,192 B (sequence parallel, b = 1)
    from planner.formulas import activations as A

    model = load_model("175b")
    base = dict(dp=4, tp=4, pp=8, mbs=1, n_micro=32, gbs=128, seq_len=2048, zero_stage=1,
                recompute="selective", sequence_parallel=True)
    bf16 = plan_costs(numbers(model, H100, PlanConfig(**base)), Choices.of(PlanConfig(**base)))
    fp8c = PlanConfig(**base, precision="fp8")
    fp8 = plan_costs(numbers(model, H100, fp8c), Choices.of(fp8c))
    per_layer = A.fp8_linear_input_bytes(2048, 1, 12288, 96, 128, 49152, 4, 1, True)
    assert per_layer == 44_040_192
    assert float(bf16["layer_activation_bytes"] - fp8["layer_activation_bytes"]) == per_layer
    layer_linear = P.layer_sharded_params(12288, 96, 96, 128, 49152, 2, 1)
    cache = 2 * float(fp8["stage_layers"]) * layer_linear / 4
    # delayed scaling's amax histories: 12 layers × 4 linears × 5 tensors × 4 B × (1024 + 2)
    # = 984,960 B; and the layer under backward recomputes the attention core, whose 16-bit
    # output only the kernel kept under fp8 (the projection keeps its own fp8 copy):
    # 2·s·b·a·d_h/t = 2·2048·12288/4 = 12,582,912 B alive at that moment
    amax = 12 * 4 * 5 * 4 * 1026
    recomputed_out = 2 * 2048 * 12288 / 4
    assert float(fp8["allocated_bytes"] - bf16["allocated_bytes"]) == pytest.approx(
        cache + amax + recomputed_out
        - float(fp8["inflight_first"] * fp8["stage_layers"]) * per_layer, rel=1e-9)


@pytest.mark.parametrize("zero, expected", [(0, 0.0), (1, 2e9), (2, 2e9), (3, 3e9)])
def test_deepspeed_buckets_at_their_defaults(zero, expected):
    # reduce_bucket_size 5e8 elements in 16-bit = 1e9 B; stages 1-2 with overlap_comm (emitted
    # on) keep two; stage 3 one and up to stage3_max_live_parameters = 1e9 gathered 16-bit
    # parameters = 2e9 B
    assert get("deepspeed").memory.bucket_bytes(ZeroStage(zero)) == expected


def test_learned_position_table_is_sized_for_the_sequence_the_job_runs():
    # GPT-3 175B has 2,048 learned positions; at --seq-len 8192 the job holds 8,192 rows of
    # h = 12,288: (8192 − 2048)·12288 = 75,497,472 more parameters, on the first stage
    model = load_model("175b")
    base = dict(dp=8, tp=8, pp=16, mbs=1, n_micro=8, gbs=64, zero_stage=1, recompute="full")
    short = estimate(model, H100, PlanConfig(**base, seq_len=2048))
    long = estimate(model, H100, PlanConfig(**base, seq_len=8192))
    assert long.model.n_params - short.model.n_params == (8192 - 2048) * 12288


def test_a_search_the_framework_rules_empty_says_which_rule():
    # torchtitan has no ZeRO-1; DeepSpeed's pipeline engine no ZeRO-3: each says so in one line
    r = runner.invoke(app, ["search", "-m", "70b", "-n", "512", "--framework", "torchtitan",
                            "--zero", "1"])
    assert r.exit_code != 0 and "torchtitan runs ZeRO stages 0, 2, 3" in r.output
    r = runner.invoke(app, ["search", "-m", "70b", "-n", "512", "--framework", "deepspeed",
                            "--zero", "3", "--pp", "4"])
    assert r.exit_code != 0 and "ZeRO-3 with pipeline parallelism is not supported" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_deepspeed_context_parallelism_is_ulysses_all_to_all():
    # DeepSpeed's cp is Ulysses: per layer and micro-batch 2·(c − 1)/c · act·b·(s/c)·d_h·(2a + 2k)
    # (four all-to-alls each way of Q, K, V and the output). Llama 3.1 8B, cp 2, tp 1, b 1,
    # s 8192: 2·(1/2)·2·4096·128·(64 + 16) = 83,886,080 B per layer; 32 layers, 4 micro-batches
    model = load_model("8b")
    base = dict(dp=4, tp=1, pp=1, cp=2, mbs=1, n_micro=4, gbs=16, seq_len=8192, zero_stage=1,
                recompute="full", sequence_parallel=False)
    ds = estimate(model, H100, PlanConfig(**base, framework="deepspeed"))
    assert ds.comm.cp_bytes == pytest.approx(32 * 4 * 83_886_080)
    # Megatron's ring passes K and V (k·d_h wide) 3·(c − 1) times: 3·2·2·4096·8·128 = 50,331,648
    mg = estimate(model, H100, PlanConfig(**base))
    assert mg.comm.cp_bytes == pytest.approx(32 * 4 * 50_331_648)


def test_torchtitan_runs_gated_mlp_models_only():
    # torchtitan's language models share a SwiGLU feed-forward, and plan3d's eager and SAC
    # activation sets assume it: a GELU model (GPT-3) is refused with the reason, a SwiGLU one runs
    config = PlanConfig(dp=64, tp=8, pp=2, mbs=1, n_micro=32, gbs=2048, seq_len=2048, zero_stage=3,
                        framework="torchtitan")
    with pytest.raises(PlanError, match=r"torchtitan: its language models have a gated \(SwiGLU\) "
                                        r"MLP, gpt3-175b a plain one \(gelu\)"):
        estimate(load_model("gpt3-175b"), load_hardware("h100-nvlink"), config)
    assert estimate(load_model("70b"), load_hardware("h100-nvlink"),
                    config.model_copy(update={"seq_len": 8192})).memory.total_bytes > 0
