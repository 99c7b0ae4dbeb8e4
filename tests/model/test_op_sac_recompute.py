"""torchtitan's per-op selective AC, costed as it reruns (issue 23, small-expert rows too fast):
every second `aten.mm` of a checkpointed block, the router gate (forced) and the routed experts'
`torch._grouped_mm` (not in its save list) run again in the backward with every op it does not
save, while the attention product (SDPA, flex) is saved (formulas.recompute.op_sac_recomputed_
weights; torchtitan activation_checkpoint.py @ 99fee810b, v0.2.2, 0.3.0) — except in its
DeepSeek-V3 flavours before v0.2.1 (--torchtitan-flex-ac), whose flex attention ran in full AC
(formulas.recompute.op_sac_regions). Megatron's
selective recompute (the core attention) is unchanged. Hand-derived values throughout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.formulas import recompute as RC
from planner.model.estimate import estimate
from planner.model.numbers import model_numbers
from planner.schema import PlanConfig

MODEL_FILE = str(Path(__file__).parents[2] / "planner" / "reference" / "models"
                 / "torchtitan-deepseek-v3-16b.toml")
ARGS = ["explain", "--model", MODEL_FILE, "--gpus", "8", "--hw", "h100-nvlink", "--plan",
        "dp8 tp1 pp1 ep8 mbs1 z3 sel", "--gbs", "8", "--seq-len", "4096", "--json"]


def _terms(framework: str, *extra: str) -> dict:
    r = CliRunner().invoke(app, [*ARGS, "--framework", framework, *extra])
    assert r.exit_code == 0, r.output
    return {t["key"]: t["value"] for t in json.loads(r.stdout)["terms"]}


def test_the_rule_by_hand():
    # mms 1..7 in call order: the 2nd, 4th and 6th rerun (2 + 4 + 6), the forced and grouped all
    assert RC.op_sac_recomputed_weights([1, 2, 3, 4, 5, 6, 7], 10, 100) == 122
    assert RC.op_sac_recomputed_weights([5]) == 0  # one mm: saved
    assert RC.op_sac_rerun_s(2.0, 0.25, 1.0) == 1.5


def test_a_llama_block_reruns_wk_wo_w3():
    # Llama 3.1 8B: h 4096, 8 KV heads of 128, f 14336; wq, wk, wv, wo, w1, w3, w2 in call
    # order: wk 4096·1024 = 4,194,304, wo 4096² = 16,777,216, w3 4096·14336 = 58,720,256 —
    # the mms formulas.activations.torchtitan_sac_layer_activation_bytes does not keep
    x = model_numbers(load_model("llama-3.1-8b"))
    assert x["sac_dense_matmul"] == 4_194_304 + 16_777_216 + 58_720_256


def test_deepseek_v3_16b_moe_layer_by_hand():
    # MLA without q compression, h 2048, 16 heads, d_nope 128, d_rope 64, r_kv 512, d_v 128, the
    # whole block one op-SAC region (torchtitan >= v0.2.1): mms in call order wq 2048·16·192,
    # wkv_a 2048·576 = 1,179,648 (rerun), wkv_b, wo 2048·2048 = 4,194,304 (rerun), the shared
    # experts' one MLP of 2·1408 = 2816: w1, w3 (rerun, 5,767,168), w2; the gate 2048·64 =
    # 131,072 forced; 6 experts · 3 · 2048·1408 = 51,904,512 grouped:
    # 1,179,648 + 4,194,304 + 5,767,168 + 131,072 + 51,904,512 = 63,176,704
    x = model_numbers(load_model(MODEL_FILE))
    assert x["sac_moe_matmul"] == 63_176_704
    # the dense first layer: wkv_a, wo and its MLP's w3 (2048·10944 = 22,413,312)
    assert x["sac_dense_matmul"] == 1_179_648 + 4_194_304 + 22_413_312
    # of 13,762,560 + 131,072 + 51,904,512 + 17,301,504 = 83,099,648 active: ρ = 0.760254...
    terms = _terms("torchtitan")
    assert terms["op_sac_share"] == pytest.approx(63_176_704 / 83_099_648, rel=1e-12)
    # T_rec = ρ·T_mm + (T_fwd − T_host − T_mm − T_att − T_core): the compiled flex region is
    # saved, and so is the dispatch's device-to-host copy (no second wait, T_host)
    rec = (terms["op_sac_share"] * terms["matmul_s"] + terms["forward_layer_s"]
           - terms["moe_host_wait_s"] - terms["matmul_s"] - terms["attention_s"]
           - terms.get("attention_core_s", 0))
    assert terms["recompute_layer_s"] == pytest.approx(rec, rel=1e-12)
    # its MoE scatter-adds (MoE.forward's scatter_add, gather's backward) whatever the switch
    assert terms["moe_atomic_scatter_s"] > 0


def test_deepseek_v3_16b_moe_layer_on_the_flex_path_by_hand():
    # torchtitan before v0.2.1 (--torchtitan-flex-ac): its flex attention puts the attention
    # in full AC (every weight rerun): wq 2048·16·192 = 6,291,456, wkv_a 1,179,648, wkv_b
    # 512·16·256 = 2,097,152, wo 4,194,304: 13,762,560. The MoE in op SAC, counted from its own
    # first mm: shared w3 rerun 5,767,168; the gate 131,072 forced; 51,904,512 grouped:
    # 13,762,560 + 5,767,168 + 131,072 + 51,904,512 = 71,565,312
    x = model_numbers(load_model(MODEL_FILE))
    assert x["sac_moe_matmul_flex"] == 71_565_312
    assert x["sac_dense_matmul_flex"] == 13_762_560 + 22_413_312
    terms = _terms("torchtitan", "--torchtitan-flex-ac")
    assert terms["op_sac_share"] == pytest.approx(71_565_312 / 83_099_648, rel=1e-12)
    # T_rec = ρ·T_mm + (T_fwd − T_host − T_mm − T_att − T_core) + T_att: the flex product
    # reruns too (the wait for the split sizes does not: T_host)
    rec = (terms["op_sac_share"] * terms["matmul_s"] + terms["forward_layer_s"]
           - terms["moe_host_wait_s"] - terms["matmul_s"] - terms.get("attention_core_s", 0))
    assert terms["recompute_layer_s"] == pytest.approx(rec, rel=1e-12)


def test_megatron_selective_is_the_core_attention():
    terms = _terms("megatron")
    assert "op_sac_share" not in terms and "moe_atomic_scatter_s" not in terms
    assert terms["recompute_layer_s"] == pytest.approx(
        terms["attention_s"] + terms.get("attention_core_s", 0), rel=1e-12)


def test_hardware_flops_count_the_rerun_matmuls():
    # a dense Llama on torchtitan: selective adds B·L·ρ·2·s·W_active hardware FLOPs, ρ·W_active
    # = 79,691,776 per token; B = 8 sequences of s = 8192, L = 32
    model, hw = load_model("llama-3.1-8b"), load_hardware("h100-nvlink")
    base = dict(dp=8, tp=1, pp=1, mbs=1, n_micro=1, gbs=8, seq_len=8192, zero_stage=3,
                grad_dtype="fp32", framework="torchtitan", sequence_parallel=False)
    sel = estimate(model, hw, PlanConfig(**base, recompute="selective")).time.hardware_flops
    none = estimate(model, hw, PlanConfig(**base, recompute="none")).time.hardware_flops
    assert sel - none == pytest.approx(8 * 32 * 79_691_776 * 2 * 8192, rel=1e-9)
