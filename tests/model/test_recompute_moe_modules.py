"""fit: `layernorm` and `moe_act` in --recompute-modules (Megatron-Core transformer_layer.py
l.470-530, moe/experts.py activation_recompute, gpt_layer_specs.py @ d98e8a64dd): what each
drops from a layer's saved set, hand-derived, and what they cost to rerun."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.schema import PlanConfig

MiB = 2**20
H100 = load_hardware("h100-nvlink")


def noted(model, **kw):
    base = dict(dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
                recompute="selective", sequence_parallel=True)
    config = PlanConfig(**{**base, **kw})
    seen = {}

    def note(name, value):
        seen[name] = value
        return value

    plan_costs(numbers(load_model(model), H100, config), Choices.of(config), note)
    return seen


def test_layernorm_drops_a_moe_layers_pre_mlp_norm_output():
    # Mixtral 8x7B (not MLA), tp 2 with SP: the pre-MLP norm's 16-bit output,
    # 2 B · 4096 · 1 · 4096 / 2 = 16 MiB per layer and micro-batch
    a = noted("mixtral-8x7b", recompute_modules=("core_attn",))
    b = noted("mixtral-8x7b", recompute_modules=("core_attn", "layernorm"))
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == 16 * MiB


def test_moe_act_drops_the_experts_fc2_input():
    # Mixtral: k = 2 experts of f_e = 14336 per token, on the busiest rank λ times the mean;
    # fc2's 16-bit input, 2 · 4096 · λ · 2 · 14336 / 2 = λ · 112 MiB
    a = noted("mixtral-8x7b", recompute_modules=("core_attn",))
    b = noted("mixtral-8x7b", recompute_modules=("core_attn", "moe_act"))
    lam = float(a["moe_load"])
    assert lam >= 1
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == \
        pytest.approx(lam * 112 * MiB, rel=1e-12)
    # its rerun reads the gate and up outputs and writes one (3 · 2 B · 4096 · λ·2·14336 / 2),
    # memory-bound: the backward's recompute time grows by that over the HBM bandwidth
    rerun = 3 * 2 * 4096 * lam * 2 * 14336 / 2
    x = numbers(load_model("mixtral-8x7b"), H100, PlanConfig(
        dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
        recompute="selective", sequence_parallel=True))
    assert float(b["recompute_layer_s"]) - float(a["recompute_layer_s"]) == pytest.approx(
        rerun / (x.hbm_bw * x.hbm_eff), rel=1e-9)


def test_a_dense_layer_has_nothing_to_drop_for_layernorm():
    # Transformer Engine fuses a dense layer's two norms into the QKV and fc1 linears
    # (gpt_layer_specs.py): Megatron-Core recomputes no norm there
    kw = dict(model="70b", dp=8, tp=8, pp=1, ep=1, gbs=8)
    plan = estimate(load_model(kw.pop("model")), H100, PlanConfig(
        **{**dict(mbs=1, n_micro=1, seq_len=4096, zero_stage=1, recompute="selective",
                  sequence_parallel=True), **kw, "recompute_modules": ("core_attn", "layernorm")}))
    same = estimate(load_model("70b"), H100, PlanConfig(
        **{**dict(mbs=1, n_micro=1, seq_len=4096, zero_stage=1, recompute="selective",
                  sequence_parallel=True), **kw, "recompute_modules": ("core_attn",)}))
    assert plan.memory.activations_bytes == same.memory.activations_bytes
    assert plan.time.step_s == same.time.step_s


def test_what_megatron_core_refuses_is_refused():
    dense = PlanConfig(dp=8, tp=8, pp=1, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
                       recompute="selective", sequence_parallel=True,
                       recompute_modules=("moe_act",))
    with pytest.raises(PlanError, match="moe_act"):
        estimate(load_model("70b"), H100, dense)
    delayed = PlanConfig(dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                         zero_stage=1, recompute="selective", sequence_parallel=True,
                         precision="fp8", recompute_modules=("layernorm",))
    with pytest.raises(PlanError, match="delayed"):
        estimate(load_model("mixtral-8x7b"), H100, delayed)
    current = PlanConfig(**{**delayed.model_dump(), "fp8_recipe": "current"})
    assert estimate(load_model("mixtral-8x7b"), H100, current).memory.total_bytes > 0


def test_megatron_writes_them_and_the_cli_takes_them():
    from typer.testing import CliRunner

    from planner.cli import app
    from planner.frameworks.emit import emit

    c = PlanConfig(dp=8, tp=2, pp=2, ep=8, mbs=1, n_micro=8, gbs=64, seq_len=4096, zero_stage=1,
                   recompute="selective", sequence_parallel=True,
                   recompute_modules=("core_attn", "layernorm", "moe_act"))
    text = emit("megatron", c, load_model("qwen3-30b-a3b")).text
    assert "--recompute-modules core_attn layernorm moe_act" in text
    assert "--moe-grouped-gemm" in text  # what moe_act needs (transformer_config.py)
    runner = CliRunner()
    args = ["explain", "--model", "qwen3-30b-a3b", "--gpus", "32", "--tp", "2", "--pp", "2",
            "--ep", "8", "--etp", "1", "--recompute", "selective", "--recompute-modules"]
    r = runner.invoke(app, [*args, "layernorm,moe_act"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["explain", "--model", "70b", "--gpus", "64", "--tp", "8", "--pp",
                            "1", "--recompute", "selective", "--recompute-modules", "moe_act"])
    assert r.exit_code != 0 and "moe_act" in r.stderr


def _with_numbers(model, **kw):
    base = dict(dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096, zero_stage=1,
                recompute="selective", sequence_parallel=True)
    config = PlanConfig(**{**base, **kw})
    return numbers(load_model(model), H100, config), noted(model, **kw)


def test_mla_up_proj_drops_q_k_v_and_the_normed_latents():
    # DeepSeek-V3 (a = 128, r_q = 1536, r_kv = 512, d_qk = 192, d_v = 128), tp 2 with SP:
    # 2 B · 4096 · ((1536 + 512)/2 + 128·(2·192 + 128)/2) = 8192 · (1024 + 32768)
    # = 276,824,064 B = 264 MiB per layer and micro-batch (DeepSeek-V3 §3.2.3's recipe)
    a = noted("deepseek-v3", recompute_modules=("layernorm",))
    b = noted("deepseek-v3", recompute_modules=("layernorm", "mla_up_proj"))
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == 264 * MiB


def test_an_mla_layer_keeps_its_core_without_core_attn():
    # DeepSeek-V3's recipe leaves core_attn out: the flash core's fp32 log-sum-exp stays saved,
    # 4 B · a · s · b / t = 4 · 128 · 4096 / 2 = 1 MiB per layer (as for a dense layer)
    a = noted("deepseek-v3", recompute_modules=("layernorm", "mla_up_proj"))
    b = noted("deepseek-v3", recompute_modules=("core_attn", "layernorm", "mla_up_proj"))
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == 1 * MiB


def test_mla_up_proj_reruns_the_two_up_projections():
    # its GEMMs: 2·s·b·W_up/t FLOPs with W_up = 1536·128·192 + 512·128·256 = 54,525,952,
    # 2·4096·54,525,952/2 = 223,338,299,392 at the peak × GEMM efficiency; its two latent
    # norms read and write 2·2 B·4096·(1536 + 512)/2 = 16,777,216 B of HBM
    x, a = _with_numbers("deepseek-v3", recompute_modules=("layernorm",))
    _, b = _with_numbers("deepseek-v3", recompute_modules=("layernorm", "mla_up_proj"))
    expect = (223_338_299_392 / (x.peak_flops * x.gemm_eff)
              + 16_777_216 / (x.hbm_bw * x.hbm_eff))
    assert float(b["recompute_layer_s"]) - float(a["recompute_layer_s"]) == pytest.approx(
        float(expect), rel=1e-9)
    # and the hardware FLOPs (HFU) count them in every layer: gbs 8 × (61 layers + 1 MTP) ×
    # 2·4096·54,525,952 = 496 · 446,676,598,784 = 221,551,592,996,864
    assert float(b["hardware_flops"]) - float(a["hardware_flops"]) == pytest.approx(
        221_551_592_996_864, rel=1e-12)


def test_shared_experts_drops_their_intermediates():
    # DeepSeek-V3's one shared expert of f_s = 2048 (SwiGLU), tp 2: the activation's input
    # (2 × 2 B) and fc2's input (2 B), 4096 · 2048 · 6 / 2 = 24 MiB
    a = noted("deepseek-v3", recompute_modules=("core_attn",))
    b = noted("deepseek-v3", recompute_modules=("core_attn", "shared_experts"))
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == 24 * MiB


def test_moe_drops_the_whole_moe_layer_but_its_input():
    # DeepSeek-V3, tp 2 with SP, λ the busiest rank's load: the experts' width
    # W = λ·8·2048 + 2048, each token's (SwiGLU) activation input and fc2 input, 6 B a column,
    # over t: 4096·W·6/2; the dispatcher's (8λ − 1) extra copies of h = 7168 and 256 fp32
    # scores per token on the sequence shard: 4096/2·((8λ − 1)·2·7168 + 4·256)
    a = noted("deepseek-v3", recompute_modules=("core_attn",))
    b = noted("deepseek-v3", recompute_modules=("core_attn", "moe"))
    lam = float(a["moe_load"])
    width = lam * 8 * 2048 + 2048
    expect = 4096 * width * 6 / 2 + 2048 * ((8 * lam - 1) * 2 * 7168 + 4 * 256)
    assert float(a["layer_activation_bytes"]) - float(b["layer_activation_bytes"]) == \
        pytest.approx(expect, rel=1e-12)
    # moe holds moe_act's and shared_experts' drops: listing them too changes nothing
    c = noted("deepseek-v3", recompute_modules=("core_attn", "moe", "moe_act", "shared_experts"))
    assert float(c["layer_activation_bytes"]) == float(b["layer_activation_bytes"])
    assert float(c["recompute_layer_s"]) == float(b["recompute_layer_s"])


def test_moe_reruns_the_token_exchange_as_full_recompute_does():
    # the checkpointed MoE layer's forward runs again in the backward, its dispatch and
    # combine with it: the exchange's bytes are those of full recompute (one more forward)
    sel = noted("qwen3-30b-a3b", recompute_modules=("core_attn", "moe"))
    base = noted("qwen3-30b-a3b", recompute_modules=("core_attn",))
    full = noted("qwen3-30b-a3b", recompute="full")
    assert float(sel["ep_bytes"]) == pytest.approx(float(full["ep_bytes"]), rel=1e-12)
    assert float(sel["ep_bytes"]) > float(base["ep_bytes"])
    # and its GEMMs: the rerun is at least the experts' matmuls beyond core_attn's
    assert float(sel["recompute_layer_s"]) - float(base["recompute_layer_s"]) > \
        float(base["expert_matmul_s"])


@pytest.mark.parametrize("model, modules, match", [
    ("70b", ("mla_up_proj",), "multi-latent"),
    ("70b", ("moe",), "MoE layer"),
    ("qwen3-30b-a3b", ("shared_experts",), "shared experts"),
])
def test_modules_the_model_lacks_are_refused(model, modules, match):
    ep = 8 if model != "70b" else 1
    c = PlanConfig(dp=8, tp=2, pp=1, ep=ep, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                   zero_stage=1, recompute="selective", sequence_parallel=True,
                   recompute_modules=modules)
    with pytest.raises(PlanError, match=match):
        estimate(load_model(model), H100, c)


def test_shared_experts_is_refused_with_the_shared_expert_overlap():
    # transformer_config.py: "shared_experts recompute cannot work with
    # --moe-shared-expert-overlap"
    c = PlanConfig(dp=8, tp=2, pp=1, ep=8, mbs=1, n_micro=1, gbs=8, seq_len=4096,
                   zero_stage=1, recompute="selective", sequence_parallel=True,
                   recompute_modules=("shared_experts",), moe_shared_expert_overlap=True)
    with pytest.raises(PlanError, match="overlap"):
        estimate(load_model("deepseek-v3"), H100, c)


def test_the_deepseek_v3_recipe_is_written_and_refused_elsewhere():
    from typer.testing import CliRunner

    from planner.cli import app
    from planner.frameworks.emit import emit

    c = PlanConfig(dp=64, tp=1, pp=16, ep=64, mbs=1, n_micro=16, gbs=1024, seq_len=4096,
                   zero_stage=1, recompute="selective",
                   recompute_modules=("layernorm", "mla_up_proj"))
    assert "--recompute-modules layernorm mla_up_proj" in emit(
        "megatron", c, load_model("deepseek-v3")).text
    # a layout written without core_attn reads back without it (sel+… would add it)
    from planner.layout_text import parse_layout
    assert "selective[layernorm+mla_up_proj]" in c.short_label()
    assert parse_layout(c.short_label())["recompute_modules"] == "layernorm,mla_up_proj"
    runner = CliRunner()
    for fw in ("torchtitan", "deepspeed"):
        r = runner.invoke(app, ["explain", "--model", "qwen3-30b-a3b", "--gpus", "32",
                                "--framework", fw, "--tp", "1", "--pp", "1", "--ep", "8",
                                "--recompute", "selective", "--recompute-modules", "moe"])
        assert r.exit_code != 0, r.output
        assert "recompute-modules" in r.stderr and len(r.stderr.strip().splitlines()) == 1
