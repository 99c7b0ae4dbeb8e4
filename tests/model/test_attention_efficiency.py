"""Flash attention at the measured rates of the kernel each framework runs (schema.
AttentionEfficiency, Framework.attention_kernel, model.numbers.attention_numbers): the forward at
its forward share of the 16-bit peak, the backward at 2.5× the forward's FLOPs at its backward
share (formulas.timing.attention_backward_ratio). The figures are the profiles' (each with its
source there); these tests check the arithmetic and which kernel each framework takes."""

from __future__ import annotations

import pytest
import sympy

from planner.calibrate import profile_with
from planner.catalog import load_hardware, load_model
from planner.formulas import timing as T
from planner.formulas.choices import Attention
from planner.model.explain import recorded_costs
from planner.schema import PlanConfig

MODEL = load_model("llama-3.1-8b")  # a = 32 heads of d_h = 128
H100 = load_hardware("h100-nvlink")
PEAK_16 = 989.4e12
# one layer's QKᵀ and P·V forward at s = 8,192, b = 1, causal half: 2·a·b·d_h·s² =
# 2·32·1·128·8192² = 549,755,813,888 FLOPs
ATT_FLOPS = 2 * 32 * 128 * 8192**2


def notes(hw=H100, **config):
    """Every intermediate one 8B plan's costing noted."""
    cfg = PlanConfig(**{"dp": 1, "seq_len": 8192, "gbs": 1, **config})
    return recorded_costs(MODEL, hw, cfg)[1]


def test_the_backward_ratio_is_the_flops_ratio_over_the_rates():
    # r = f·η_fwd/η_bwd, symbolically, and f itself where the rates are equal
    f, a, b = sympy.symbols("f a b", positive=True)
    assert T.attention_backward_ratio(f, a, b) == f * a / b
    assert T.attention_backward_ratio(2.5, 0.63, 0.63) == pytest.approx(2.5, rel=1e-15)
    # cuDNN on H100: 2.5·0.53/0.43 = 3.0814 — cuDNN's measured causal 2.98-3.12 at 8k-4k
    assert T.attention_backward_ratio(2.5, 0.53, 0.43) == pytest.approx(3.08140, rel=1e-5)


@pytest.mark.parametrize("framework, kernel, fwd, bwd", [
    # Megatron: Transformer Engine's cuDNN fused attention, 0.53 / 0.43 on H100
    ("megatron", "cudnn", 0.53, 0.43),
    # torchtitan: FlexAttention's Triton kernel, 0.31 / 0.26
    ("torchtitan", "flex", 0.31, 0.26),
    # DeepSpeed (Megatron-DeepSpeed --use-flash-attn-v2): FlashAttention-2, 0.33 / 0.30
    ("deepspeed", "fa2", 0.33, 0.30),
])
def test_each_framework_runs_its_kernel_at_the_profiles_rates(framework, kernel, fwd, bwd):
    n = notes(framework=framework, zero_stage=3 if framework == "torchtitan" else 1)
    assert getattr(H100.efficiency.attention, f"{kernel}_forward") == fwd
    # T_att = 549,755,813,888 / (989.4e12 · fwd): cuDNN 1.04838 ms, flex 1.79237 ms, FA2
    # 1.68378 ms
    assert n["attention_s"] == pytest.approx(ATT_FLOPS / (PEAK_16 * fwd), rel=1e-12)
    # the backward's attention: T_bwd − 2·(T_fwd − T_att) = 2.5·T_att·fwd/bwd (no MoE terms)
    backward_attention = n["backward_layer_s"] - 2 * (n["forward_layer_s"] - n["attention_s"])
    assert backward_attention == pytest.approx(2.5 * ATT_FLOPS / (PEAK_16 * bwd), rel=1e-9)


def test_a_kernel_the_profile_has_not_measured_runs_at_the_gemm_figure():
    # A100 has no [efficiency.attention]: η = 0.68 both ways, the 2.5× of the FLOPs
    a100 = load_hardware("a100-nvlink")
    n = notes(hw=a100)
    assert n["attention_s"] == pytest.approx(ATT_FLOPS / (312e12 * 0.68), rel=1e-12)
    # B200 has no FlashAttention-2 figure: DeepSpeed's keeps η = 0.61; Megatron's cuDNN 0.54
    # (FlashAttention-4's 0.63 over 1.17), torchtitan's flex 0.28
    b200 = load_hardware("b200-nvlink")
    assert b200.efficiency.attention.fa2_forward is None
    assert notes(hw=b200, framework="deepspeed")["attention_s"] == pytest.approx(
        ATT_FLOPS / (2250e12 * 0.61), rel=1e-12)
    assert notes(hw=b200)["attention_s"] == pytest.approx(ATT_FLOPS / (2250e12 * 0.54),
                                                          rel=1e-12)
    assert notes(hw=b200, framework="torchtitan", zero_stage=3)["attention_s"] == \
        pytest.approx(ATT_FLOPS / (2250e12 * 0.28), rel=1e-12)
    # the Blackwell Ultra profiles take B200's, stated as an assumption
    for hw in ("b300-nvlink", "gb300-nvl72", "gb200-nvl72"):
        assert load_hardware(hw).efficiency.attention == b200.efficiency.attention, hw


def test_a_kernels_figures_come_in_pairs():
    # a forward without its backward would leave the backward at the GEMM figure, faster than
    # the measured forward: refused, naming what is missing
    from pydantic import ValidationError

    from planner.schema import AttentionEfficiency

    with pytest.raises(ValidationError, match="cudnn_forward is given without cudnn_backward"):
        AttentionEfficiency(cudnn_forward=0.53)
    with pytest.raises(ValidationError, match="flex_backward is given without flex_forward"):
        AttentionEfficiency(flex_backward=0.26)
    assert AttentionEfficiency(fa2_forward=0.33, fa2_backward=0.30).fa2_backward == 0.30


def test_a_materialised_attention_runs_at_the_gemm_figure():
    # classic attention's products are batched GEMMs: η = 0.63 forward and backward, its whole
    # square (2·ATT_FLOPS) and 2× the forward in the backward
    n = notes(attention=Attention.CLASSIC)
    assert n["attention_s"] == pytest.approx(2 * ATT_FLOPS / (PEAK_16 * 0.63), rel=1e-12)


def test_slower_attention_makes_every_plan_slower_and_nothing_else_moves():
    # the same plan with the attention figures removed (η both ways) is faster by exactly the
    # attention's forward and backward difference, per layer
    flat = profile_with(H100, {"efficiency.attention": {}})
    measured, at_gemm = notes(), notes(hw=flat)
    fwd_gain = measured["attention_s"] - at_gemm["attention_s"]
    assert fwd_gain == pytest.approx(ATT_FLOPS / PEAK_16 * (1 / 0.53 - 1 / 0.63), rel=1e-9)
    assert measured["forward_layer_s"] - at_gemm["forward_layer_s"] == pytest.approx(
        fwd_gain, rel=1e-9)
    assert measured["matmul_s"] == at_gemm["matmul_s"]
    bwd_gain = measured["backward_layer_s"] - at_gemm["backward_layer_s"]
    # 2.5·ATT/F·(1/0.43 − 1/0.63): the backward's attention alone
    assert bwd_gain == pytest.approx(2.5 * ATT_FLOPS / PEAK_16 * (1 / 0.43 - 1 / 0.63),
                                     rel=1e-9)


def test_explain_json_names_the_constants_its_formulas_use():
    # η_att and η_att,b are in the formulas; their values come with them in --json
    import json

    from typer.testing import CliRunner

    from planner.cli import app

    def constants(*extra):
        out = CliRunner().invoke(app, ["explain", "--model", "8b", "--gpus", "8", "--zero", "3",
                                       "--json", *extra])
        assert out.exit_code == 0, out.output
        data = json.loads(out.stdout)
        return {c["symbol"]: c["value"] for c in data["constants"]}, data["terms"]

    named, terms = constants()
    assert (named["η_att"], named["η_att,b"], named["η"]) == (0.53, 0.43, 0.63)
    assert "η_att" in next(t["formula"] for t in terms if t["key"] == "attention_s")
    # a materialised attention's products run at η: no η_att to name
    named, terms = constants("--attention", "classic")
    assert "η_att" not in named
    assert "η_att" not in next(t["formula"] for t in terms if t["key"] == "attention_s")


def test_the_constants_listed_are_the_ones_the_formulas_name():
    # a dense plan's formulas name no MoE constant (W_sc, t_h: the un-permutation's scatter-add,
    # the host's wait for the token counts); whole names only: η does not count as named
    # because η_hbm is
    import json
    import re

    from typer.testing import CliRunner

    from planner.cli import app
    from planner.model.explain import named_in

    out = CliRunner().invoke(app, ["explain", "--model", "8b", "--gpus", "8", "--zero", "3",
                                   "--json"])
    data = json.loads(out.stdout)
    listed = {c["symbol"] for c in data["constants"]}
    assert not {"W_sc", "t_h", "v_max"} & listed
    text = " ".join(t["formula"] for t in data["terms"])
    for symbol in listed:
        assert re.search(rf"(?<![\w,]){re.escape(symbol)}(?!\w|,\S)", text), symbol
    assert named_in([("η", 0.6), ("η_hbm", 0.89)], ["b·s/(W_hbm·η_hbm)"]) == [("η_hbm", 0.89)]
    assert named_in([("e", 8), ("c", 1)], ["min(8, e, c·d)"]) == [("e", 8), ("c", 1)]


def test_every_framework_runs_a_kernel_the_profiles_can_measure():
    from planner.frameworks import FRAMEWORKS
    from planner.schema import ATTENTION_KERNELS, AttentionEfficiency

    fields = set(AttentionEfficiency.model_fields)
    assert fields == {f"{k}_{d}" for k in ATTENTION_KERNELS for d in ("forward", "backward")}
    assert {fw.attention_kernel for fw in FRAMEWORKS.values()} <= set(ATTENTION_KERNELS)


def test_flash_backward_flops_with_two_head_widths():
    # (3·d_qk + 2·d_v)/(d_qk + d_v): 5/2 at one width, symbolically; MLA's 192/128:
    # (576 + 256)/320 = 2.6
    d = sympy.symbols("d", positive=True)
    assert sympy.simplify(T.flash_backward_flops_factor(d, d) - sympy.Rational(5, 2)) == 0
    assert T.flash_backward_flops_factor(192, 128) == pytest.approx(2.6)


def test_flex_pads_head_widths_to_powers_of_two():
    # torch inductor's flex template: next_power_of_2(192) = 256, 128 stays, 80 → 128
    assert [T.triton_padded_head_dim(d) for d in (192, 128, 80, 64)] == [256, 128, 128, 64]
    d = sympy.Symbol("d", positive=True)
    assert T.triton_padded_head_dim(d) == 2 ** sympy.ceiling(sympy.log(d, 2))
    # MLA 192/128: forward (256 + 128)/(192 + 128) = 1.2; backward (768 + 256)/(576 + 256)
    # = 1024/832 = 1.230769
    fwd, bwd = T.padded_attention_work(192, 128)
    assert (fwd, bwd) == (pytest.approx(1.2), pytest.approx(1024 / 832))
    assert T.padded_attention_work(128, 128) == (1, 1)


def test_torchtitan_mla_attention_runs_at_its_padded_widths():
    # torchtitan's DeepSeek-V3 16B (a = 16 heads, d_qk = 192, d_v = 128) on one H100, s = 4,096,
    # b = 1: 2·a·b·s²·(d_qk + d_v)/2 = 16·4096²·320 = 85,899,345,920 FLOPs, × 1.2 for flex's
    # 256-wide Q·Kᵀ, at 0.31 of 989.4e12: 336.07 µs; its backward 2.6 × the FLOPs × 1.2308/1.2
    # at 0.26: 2.6·(1024/832)/1.2·85,899,345,920/(989.4e12·0.26) = 1.06929 ms. Megatron's cuDNN
    # pads nothing: 85,899,345,920/(989.4e12·0.53)
    from pathlib import Path

    tt16 = load_model(str(Path(__file__).parents[2] / "planner" / "reference" / "models"
                          / "torchtitan-deepseek-v3-16b.toml"))
    flops = 16 * 4096**2 * 320
    for framework, fwd, bwd, pads in (("torchtitan", 0.31, 0.26, (1.2, 1024 / 832)),
                                      ("megatron", 0.53, 0.43, (1, 1))):
        cfg = PlanConfig(dp=1, seq_len=4096, gbs=1, framework=framework,
                         zero_stage=3 if framework == "torchtitan" else 1)
        n = recorded_costs(tt16, H100, cfg)[1]
        assert n["attention_s"] == pytest.approx(flops * pads[0] / (PEAK_16 * fwd), rel=1e-12)
        # the backward's attention: T_bwd − T_scat − 2·(T_fwd − T_host − T_att − T_scat)
        scat, host = n.get("moe_atomic_scatter_s", 0), n.get("moe_host_wait_s", 0)
        backward = n["backward_layer_s"] - scat - 2 * (
            n["forward_layer_s"] - host - n["attention_s"] - scat)
        assert backward == pytest.approx(2.6 * flops * pads[1] / (PEAK_16 * bwd), rel=1e-9)
