"""DeepSpeed MoE plans (issue 23): AutoEP, accepted where deepspeed 0.19.8 runs it (ep·etp
tiles the stage, etp = 1, tp = pp = cp = 1 for plan3d, any ZeRO stage: auto_ep_folding.py and
engine.py _validate_zero3_moe_compatibility), costed by the MoE formulas every framework shares
and emitted as the JSON's "expert_parallel" section (DeepSpeed's own parser reads it back in
tests/parsers/test_deepspeed.py)."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.frameworks.emit import emit
from planner.model.estimate import check_config
from planner.model.explain import explain
from planner.schema import PlanConfig

QWEN = load_model("qwen3-30b-a3b")
H100 = load_hardware("h100-nvlink")
# Qwen3-30B-A3B on 64 GPUs, ZeRO-2, ep 8: edp = 64/8 = 8 expert-data-parallel ranks
PLAN = dict(dp=64, ep=8, mbs=1, n_micro=16, gbs=1024, seq_len=4096, zero_stage=2,
            framework="deepspeed", sequence_parallel=False, recompute="selective")


def _config(**changes) -> PlanConfig:
    return PlanConfig(**{**PLAN, **changes})


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_autoep_runs_with_every_zero_stage(zero):
    check_config(QWEN, H100, _config(zero_stage=zero))  # no PlanError


@pytest.mark.parametrize("changes,match", [
    (dict(etp=2), "expert tensor parallelism"),
    (dict(dp=32, tp=2, sequence_parallel=True, gbs=512), "tp = pp = cp = 1"),
    (dict(dp=32, pp=2, gbs=512), "tp = pp = cp = 1"),
    (dict(moe_capacity_factor=1.0), "dropless"),
    (dict(moe_dispatcher="allgather"), "allgather"),
    (dict(moe_forced_balance=True), "forced balance"),
    (dict(moe_a2a_overlap=True), "all-to-all overlap"),
])
def test_what_autoep_does_not_run_is_refused(changes, match):
    with pytest.raises(PlanError, match=match):
        check_config(QWEN, H100, _config(**changes))


def test_a_model_without_an_autoep_preset_is_refused_with_ep():
    gpt_oss = load_model("gpt-oss-120b")
    with pytest.raises(PlanError, match="no preset"):
        check_config(gpt_oss, H100, _config(ep=gpt_oss.n_experts // 16))


def test_costed_by_the_shared_moe_formulas():
    """DeepSpeed's AutoEP and torchtitan run the same MoE (AutoEP ports torchtitan's: dropless
    router, all_to_all_single, torch._grouped_mm), so one plan's MoE terms under both are the
    same numbers from the same formulas — no second copy."""
    keys = ("moe_load", "moe_router_permute_s", "expert_matmul_s", "expert_wave_efficiency",
            "all_to_all_s", "ep_bytes")
    ds = {t.key: t for t in explain(QWEN, H100, _config(zero_stage=3)).terms}
    titan = {t.key: t for t in explain(QWEN, H100, _config(zero_stage=3,
                                                            framework="torchtitan")).terms}
    for key in keys:
        assert ds[key].value == pytest.approx(titan[key].value, rel=1e-12), key
        assert ds[key].formula == titan[key].formula, key
    # ep 8 inside one 8-GPU node: λ > 1 (aux-loss skew and sampling noise over 8 ranks)
    assert ds["moe_load"].value > 1


def test_emitted_expert_parallel_section():
    result = emit("deepspeed", _config(), QWEN)
    cfg = json.loads(result.text)
    assert cfg["expert_parallel"] == {"enabled": True, "autoep_size": 8,
                                      "expert_tensor_parallel_size": 1,
                                      "preset_model": "qwen3_moe", "use_grouped_mm": True,
                                      "comm_backend": "comm"}
    # ZeRO-2 with MoE asserts contiguous_gradients and reduce_scatter (stage_1_and_2.py)
    assert cfg["zero_optimization"]["contiguous_gradients"] is True
    assert cfg["zero_optimization"]["reduce_scatter"] is True
    notes = " ".join(result.notes)
    # 128 experts over ep 8: 16 a rank; edp = dp·tp·cp/ep = 64/8 = 8
    assert "16 of the 128 experts" in notes and "edp = 8" in notes
    assert "Megatron-DeepSpeed args" not in notes


def test_deepep_sizes_its_buffer_to_one_ranks_tokens():
    cfg = json.loads(emit("deepspeed", _config(moe_dispatcher="deepep", mbs=2, n_micro=8),
                          QWEN).text)
    # mbs·seq_len = 2·4096 = 8192 tokens routed by one rank per micro-batch
    assert cfg["expert_parallel"]["comm_backend"] == "deepep"
    assert cfg["expert_parallel"]["comm_max_tokens_per_rank"] == 8192


def test_deepseek_v3_shape_is_the_hugging_face_models():
    """With AutoEP the Hugging Face model carries MLA, the shared expert and the dense first
    layers, so the MoE/MLA shape refusal of the Megatron-DeepSpeed path does not apply."""
    dsv3 = load_model("deepseek-v3")
    config = PlanConfig(dp=256, ep=32, mbs=1, n_micro=8, gbs=2048, seq_len=4096, zero_stage=3,
                        framework="deepspeed", sequence_parallel=False, recompute="full")
    cfg = json.loads(emit("deepspeed", config, dsv3).text)
    assert cfg["expert_parallel"]["preset_model"] == "deepseek_v3"
    with pytest.raises(PlanError, match="MoE/MLA shape"):
        emit("deepspeed", PlanConfig(**{**config.model_dump(), "ep": 1}), dsv3)


def test_recompute_modules_are_refused():
    with pytest.raises(PlanError, match="recompute modules"):
        emit("deepspeed", _config(recompute_modules=("core_attn", "moe_act")), QWEN)
