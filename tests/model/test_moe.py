"""Mixture of experts and MLA: parameter counts by hand and against published figures, Hugging
Face import, sympy identities (a 1-expert MoE is the dense model), and the pure MoE formulas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy as sp

from planner.catalog import load_model
from planner.errors import PlanError
from planner.formulas import activations as A
from planner.formulas import flops as F
from planner.formulas import moe as MO
from planner.formulas import params as P
from planner.formulas.choices import Attention, Recompute
from planner.schema import ModelSpec

HF = Path(__file__).parents[1] / "data" / "hf"


# ---- hand-derived parameter counts ----------------------------------------------------------


def test_deepseek_v3_by_hand():
    m = load_model("deepseek-v3")
    # MLA, h = 7168, a = 128, r_q = 1536, r_kv = 512, d_n = 128, d_r = 64, d_v = 128:
    # W^DQ 7168·1536 = 11,010,048 + norm 1536; W^UQ 1536·128·192 = 37,748,736;
    # W^DKV 7168·(512 + 64) = 4,128,768 + norm 512; W^UKV 512·128·256 = 16,777,216;
    # W^O 128·128·7168 = 117,440,512                                   → 187,107,328
    assert m.attention_params == 187_107_328
    # dense layer: 187,107,328 + 3·7168·18432 (396,361,728) + 2·7168    = 583,483,392
    assert m.dense_layer_params == 583_483_392
    # MoE layer: 187,107,328 + (256 + 1)·3·7168·2048 (257·44,040,192 = 11,318,329,344)
    #            + router 256·7168 (1,835,008) + 2·7168                 = 11,507,286,016
    assert m.moe_layer_params == 11_507_286_016
    # 3 dense + 58 MoE + embedding and head 2·129280·7168 + final norm 7168:
    # 1,750,450,176 + 667,422,588,928 + 1,853,358,080 + 7168 = 671,026,404,352
    assert m.n_moe_layers == 58
    assert m.n_params == 671_026_404_352
    # active: MoE layer with 8 of 256 routed: 187,107,328 + 9·44,040,192 + 1,835,008 + 14,336
    # = 585,318,400; × 58 = 33,948,467,200 + 1,750,450,176 + 1,853,358,080 + 7168
    assert m.n_active_params == 37_552_282_624


@pytest.mark.parametrize("name, total, active, rel_total, rel_active", [
    # DeepSeek-V3 Technical Report (arXiv:2412.19437) abstract and §4.2: "671B total parameters
    # with 37B activated for each token", the main model without the 14B multi-token-prediction
    # module (the HF checkpoint's 685B includes it). Ours: 671.03B / 37.55B (37.55 counts the
    # input embedding; without it 36.63B): the figures are rounded to the billion, 2 %.
    ("deepseek-v3", 671e9, 37e9, 0.001, 0.02),
    # Qwen3 Technical Report (arXiv:2505.09388) Table 2 / model card: 235B total, 22B activated;
    # ours 235.09B / 22.19B (the 2·V·h embeddings included; q/k RMSNorms, 24k, left out).
    ("qwen3-235b-a22b", 235e9, 22e9, 0.001, 0.01),
    # Qwen3-30B-A3B model card: 30.5B total, 3.3B activated; ours 30.53B / 3.35B.
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.002, 0.02),
    # Mistral AI, "Mixtral of experts" (2023-12-11): 46.7B total, 12.9B per token;
    # ours 46,702,792,704 / 12,879,925,248.
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.001, 0.002),
    # Mistral AI, 2024-04-17: 141B total, 39B active; ours 140.62B / 39.15B.
    ("mixtral-8x22b", 141e9, 39e9, 0.003, 0.005),
])
def test_published_totals_and_active(name, total, active, rel_total, rel_active):
    m = load_model(name)
    assert m.n_params == pytest.approx(total, rel=rel_total)
    assert m.n_active_params == pytest.approx(active, rel=rel_active)


def test_gpt_oss_matches_its_model_card():
    # gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total, 5.13B active, where active
    # counts the unembedding but not the embedding (201088·2880 = 579,133,440). Left out by the
    # shape: 36 layers × (64 sinks + 128 router biases) = 6,912 — within 0.0001 %.
    m = load_model("gpt-oss-120b")
    assert m.n_params == pytest.approx(116.83e9, rel=1e-4)
    assert m.n_active_params - 201088 * 2880 == pytest.approx(5.13e9, rel=1e-3)


# ---- Hugging Face config.json import ----------------------------------------------------------


@pytest.mark.parametrize("folder, preset", [
    ("DeepSeek-V3", "deepseek-v3"), ("Qwen3-235B-A22B", "qwen3-235b-a22b"),
    ("Qwen3-30B-A3B", "qwen3-30b-a3b"), ("Mixtral-8x22B-v0.1", "mixtral-8x22b"),
    ("gpt-oss-120b", "gpt-oss-120b"),
])
def test_hf_config_matches_the_preset(folder, preset):
    imported, built_in = load_model(str(HF / folder / "config.json")), load_model(preset)
    assert imported.n_params == built_in.n_params
    assert imported.n_active_params == built_in.n_active_params
    for field in ("n_experts", "top_k", "expert_ffn", "n_shared_experts", "first_k_dense",
                  "n_moe_layers", "kv_lora_rank", "q_lora_rank", "qk_head_dim", "router",
                  "n_expert_groups", "topk_groups"):
        assert getattr(imported, field) == getattr(built_in, field), field


def test_hf_deepseek_v2_and_qwen2_moe():
    # DeepSeek-V2 (arXiv:2405.04434 §3.1.2): 236B total, 21B activated; first layer dense,
    # 2 shared + 160 routed experts, top-6, softmax router
    v2 = load_model(str(HF / "DeepSeek-V2" / "config.json"))
    assert (v2.first_k_dense, v2.n_shared_experts, v2.n_experts, v2.top_k) == (1, 2, 160, 6)
    assert v2.router == "softmax" and v2.n_moe_layers == 59
    assert v2.n_params == pytest.approx(236e9, rel=0.002)
    assert v2.n_active_params == pytest.approx(21e9, rel=0.02)
    # Qwen1.5-MoE-A2.7B (Qwen blog 2024-03-28): 14.3B total, 2.7B activated; one shared expert
    # of width 5632 (shared_expert_intermediate_size). Its q/k/v biases and the shared expert's
    # sigmoid gate (h per layer) are not read: 24·(3·2048 + 2048) ≈ 0.2M, 0.001 %.
    q2 = load_model(str(HF / "Qwen1.5-MoE-A2.7B" / "config.json"))
    assert (q2.n_shared_experts, q2.shared_expert_ffn, q2.expert_ffn) == (1, 5632, 1408)
    assert q2.n_params == pytest.approx(14.3e9, rel=0.002)
    assert q2.n_active_params == pytest.approx(2.7e9, rel=0.01)


def test_hf_moe_config_errors(tmp_path):
    cfg = json.loads((HF / "DeepSeek-V3" / "config.json").read_text())
    del cfg["kv_lora_rank"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(PlanError, match="lacks 'kv_lora_rank'"):
        load_model(str(path))
    qwen = json.loads((HF / "Qwen3-30B-A3B" / "config.json").read_text())
    qwen["mlp_only_layers"] = [0, 1]
    path.write_text(json.dumps(qwen))
    with pytest.raises(PlanError, match="mlp_only_layers"):
        load_model(str(path))


def test_model_file_validation():
    base = dict(name="x", n_layers=4, hidden=64, n_heads=4, ffn=128, vocab=100, seq_len=16)
    with pytest.raises(ValueError, match="needs qk_nope_head_dim"):
        ModelSpec(**base, kv_lora_rank=32)
    with pytest.raises(ValueError, match="need kv_lora_rank"):
        ModelSpec(**base, q_lora_rank=32)
    with pytest.raises(ValueError, match="needs both n_expert_groups"):
        ModelSpec(**base, n_experts=4, top_k=2, n_expert_groups=2)
    with pytest.raises(ValueError, match="must divide n_experts"):
        ModelSpec(**base, n_experts=4, top_k=2, n_expert_groups=3, topk_groups=1)
    with pytest.raises(ValueError, match="leaves no MoE layer"):
        ModelSpec(**base, n_experts=4, top_k=2, first_k_dense=4)
    # every other layer from the third: i ∈ {2, 4} of 0..5 → 2 MoE layers
    m = ModelSpec(**dict(base, n_layers=6), n_experts=4, top_k=2, first_k_dense=2,
                  moe_layer_freq=2)
    assert m.moe_layer_indices == (2, 4) and m.n_moe_layers == 2


# ---- identities -------------------------------------------------------------------------------

h, a, k, d, f, n, bias, nw, E, K, fs, ns, V, s, b, L = sp.symbols(
    "h a k d f n bias nw E K f_s n_s V s b L", positive=True)


def test_one_expert_moe_is_the_dense_layer():
    attn = P.attention_weight_params(h, a, k, d) + bias * (d * (a + 2 * k) + h)
    dense = P.dense_layer_params(attn, h, f, n, bias, nw)
    assert sp.simplify(P.moe_layer_params(attn, h, f, n, bias, nw, 1, 0) - dense) == 0
    assert sp.simplify(dense - P.layer_params(h, a, k, d, f, n, bias, nw)) == 0
    # and with E experts and a router it is the existing layer_params(…, E, E)
    assert sp.simplify(P.moe_layer_params(attn, h, f, n, bias, nw, E, E)
                       - P.layer_params(h, a, k, d, f, n, bias, nw, E, E)) == 0


def test_transformer_params_without_moe_layers_is_model_params():
    pos, lp, tied = sp.symbols("pos lp tied", positive=True)
    attn = P.attention_weight_params(h, a, k, d) + bias * (d * (a + 2 * k) + h)
    dense = P.dense_layer_params(attn, h, f, n, bias, nw)
    ours = P.transformer_params(L, 0, dense, 0, V, h, pos, lp, tied, nw)
    theirs = P.model_params(L, h, a, k, d, f, n, bias, nw, V, pos, lp, tied)
    assert sp.simplify(ours - theirs) == 0


def test_mla_reduces_to_multi_head_shapes():
    # attention FLOPs with d_qk = d_v = d_h are the standard ones
    assert sp.simplify(F.mla_attention_flops(s, b, a, d, d)
                       - F.layer_attention_flops(s, b, a, d)) == 0
    # saved tensors: Q, K, V, out-proj input with d_qk = d_v = d_h and k = a
    assert sp.simplify(MO.mla_sharded_activation_bytes(s, b, a, d, d, f, n)
                       - A.sharded_activation_bytes(s, b, h, a, a, d, f, n)) == 0
    # without query compression the query projection is h·a·(d_n + d_r)
    rq, rkv, dn, dr, dv = sp.symbols("r_q r_kv d_n d_r d_v", positive=True)
    no_q = P.mla_sharded_params(h, a, rq, rkv, dn, dr, dv, 0)
    assert sp.simplify(no_q - (h * a * (dn + dr) + rkv * a * (dn + dv) + a * dv * h)) == 0
    # the matmul weights are the parameters less the two latent norms (r_q + r_kv)
    assert sp.simplify(P.mla_attention_params(h, a, rq, rkv, dn, dr, dv)
                       - F.mla_matmul_weights(h, a, rq, rkv, dn, dr, dv) - rq - rkv) == 0


def test_moe_flops_reduce_to_dense():
    attn, mlp, router, mm, att, head, B = sp.symbols("attn mlp router mm att head B",
                                                     positive=True)
    assert sp.simplify(F.moe_matmul_weights_active(attn, mlp, K, 0, router)
                       - F.matmul_weight_params_active(attn, mlp, K, router)) == 0
    assert sp.simplify(F.mixed_model_flops(B, L, 0, mm, sp.Symbol("x"), att, head)
                       - F.model_flops(B, s, L, mm, att, head)) == 0


def test_ep_ranks_in_domain_by_hand():
    # Megatron orders expert ranks etp fastest: an EP group's members sit etp apart, so
    # min(ep, domain/etp) of them share a domain, at least 1:
    # ep 64, etp 1 on 8-GPU nodes: 8; ep 8, etp 2: 8/2 = 4; ep 2, etp 1: 2; etp 16 > domain: 1
    assert MO.ep_ranks_in_domain(64, 1, 8) == 8
    assert MO.ep_ranks_in_domain(8, 2, 8) == 4
    assert MO.ep_ranks_in_domain(2, 1, 8) == 2
    assert MO.ep_ranks_in_domain(4, 16, 8) == 1


def test_parallel_folding_groups():
    # 2048 GPUs as dp 64 × tp 4 × pp 8 (cp 1) → the expert layers' 256 ranks per stage as
    # ep 64 × etp 1 × edp 4
    assert MO.expert_data_parallel(64, 1, 4, 64, 1) == 4
    assert MO.local_experts(256, 64) == 4
    # expert tokens: T = 4096, k = 8, ep = 64, E = 256: 64·4096·8/256 = 8192 rows per expert
    assert MO.expert_tokens(4096, 8, 64, 256) == 8192


def test_mla_activations_by_hand():
    # DeepSeek-V3 MLA layer, s = 4096, b = 1, t = 1, selective, no dropout, MoE width stored
    # k·f_e + f_s = 8·2048 + 2048 = 18,432:
    # replicated 8·s·h = 8·4096·7168 = 234,881,024
    # latents 2·s·(2·1536 + 2·512 + 64) = 8192·4160 = 34,078,720
    # sharded 2·s·(128·(2·192 + 2·128) + 3·18432) = 8192·(81,920 + 55,296) = 1,124,073,472
    got = MO.mla_layer_activation_bytes(4096, 1, 7168, 128, 1536, 512, 192, 64, 128, 18432, 3,
                                        0, 1, 1, False, Recompute.SELECTIVE, Attention.FLASH)
    assert got == 234_881_024 + 34_078_720 + 1_124_073_472
    # full recompute keeps the input only, 2·s·h / t
    full = MO.mla_layer_activation_bytes(4096, 1, 7168, 128, 1536, 512, 192, 64, 128, 18432, 3,
                                         0, 8, 1, True, Recompute.FULL, Attention.FLASH)
    assert full == 2 * 4096 * 7168 / 8


def test_routed_width_and_dispatch_buffers():
    assert MO.routed_ffn_width(2048, 8, 2048, 1) == 18432
    assert MO.routed_ffn_width(f, 1) == f  # dense
    # s = 4096, b = 1, h = 7168, E = 256, k = 8, no TP: 4096·(7·2·7168 + 4·256)
    assert MO.moe_dispatch_activation_bytes(4096, 1, 7168, 256, 8, 1, 1, False) == \
        4096 * (7 * 2 * 7168 + 4 * 256)
    assert MO.moe_dispatch_activation_bytes(4096, 1, 7168, 0, 1, 1, 1, False) == 0


def test_moe_layers_in_span_counts_exactly():
    # the multiples of freq in [max(start, first_k_dense), stop): one count for the model
    # (ModelSpec.n_moe_layers) and for each pipeline stage's span, exact for every span
    # (e.g. first_k_dense 1, freq 2, 10 layers: layers 2, 4, 6, 8 → 4, not ⌈9/2⌉ = 5)
    import itertools

    from planner.formulas.moe import moe_layers_in_span

    assert moe_layers_in_span(0, 10, 1, 2) == 4
    # phase 1 (Qwen-MoE's (i + 1) mod 2 = 0): layers 1, 3, 5, 7, 9 → 5; from layer 2: 3, 5, 7, 9
    assert moe_layers_in_span(0, 10, 0, 2, 1, 1) == 5
    assert moe_layers_in_span(0, 10, 2, 2, 1, 1) == 4
    for start, stop, k, freq in itertools.product(range(8), range(13), range(4), range(1, 4)):
        for phase in range(freq):
            if start <= stop:
                exact = sum(1 for i in range(max(start, k), stop) if i % freq == phase)
                assert moe_layers_in_span(start, stop, k, freq, 1, phase) == exact
    assert moe_layers_in_span(0, 10, 1, 2, is_moe=0) == 0
