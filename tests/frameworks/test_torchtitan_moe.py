"""torchtitan MoE plans (issue 23): accepted where torchtitan runs them (ep divides
dp_shard·cp·tp, no expert TP: torchtitan/distributed/parallel_dims.py @ b5bcd76), emitted with
parallelism.expert_parallel_degree and the registry entry that builds the model, and — where
torchtitan 0.3 is installed — read back by its own ConfigManager and ParallelDims with the plan's
degrees and the model's experts."""

from __future__ import annotations

import shlex

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.formulas.choices import ZeroStage
from planner.frameworks.emit import emit
from planner.model.estimate import check_config
from planner.schema import PlanConfig

QWEN = load_model("qwen3-30b-a3b")
DSV3 = load_model("deepseek-v3")
# Qwen3-30B-A3B on 64 GPUs, FSDP2 (ZeRO-3) over 64, ep 8: efsdp = 64·1·1/8 = 8
QWEN_EP8 = PlanConfig(dp=64, ep=8, mbs=1, n_micro=16, gbs=1024, seq_len=4096, zero_stage=3,
                      framework="torchtitan", sequence_parallel=False)


def test_expert_parallelism_is_accepted_with_etp_one():
    hw = load_hardware("h100-nvlink")
    check_config(QWEN, hw, QWEN_EP8)  # no PlanError
    bad = PlanConfig(**{**QWEN_EP8.model_dump(), "tp": 2, "dp": 32, "etp": 2, "gbs": 512,
                        "sequence_parallel": True})
    with pytest.raises(PlanError, match="expert"):
        check_config(QWEN, hw, bad)


def test_emitted_settings_carry_ep_and_the_registry_entry():
    text = emit("torchtitan", QWEN_EP8, QWEN).text
    assert "--module qwen3" in text and "--config qwen3_30b_a3b" in text
    assert "--parallelism.expert_parallel_degree 8" in text
    # torchtitan 0.3 refuses CUDA graphs with the all-to-all dispatcher's CPU sync
    assert "--training.disable_cuda_graphs" in text
    # a MoE plan without EP still says 1: deepseek_v3_671b's registry entry sets 2 itself
    one = PlanConfig(**{**QWEN_EP8.model_dump(), "ep": 1})
    assert "--parallelism.expert_parallel_degree 1" in emit("torchtitan", one, QWEN).text


def test_megatron_only_shapes_are_still_refused_elsewhere():
    # DeepSpeed's AutoEP takes this plan (tests/frameworks/test_deepspeed_moe.py) but not with
    # expert tensor parallelism
    with pytest.raises(PlanError, match="expert tensor parallelism"):
        emit("deepspeed", PlanConfig(**{**QWEN_EP8.model_dump(), "framework": "deepspeed",
                                        "zero_stage": 1, "etp": 2}), QWEN)


def test_torchtitan_reads_it_back():
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    pytest.importorskip("torchtitan")
    import importlib.metadata

    if not importlib.metadata.version("torchtitan").startswith("0.3"):
        pytest.skip("plan3d writes the registry form for torchtitan 0.3")
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    text = emit("torchtitan", QWEN_EP8, QWEN).text
    cfg = ConfigManager().parse_args(shlex.split(text.replace("\\\n", " ")))
    dims = ParallelDims.from_config(cfg.parallelism, 64)  # validates ep | dp_shard·cp·tp
    assert (dims.ep, dims.dp_shard, dims.tp, dims.pp) == (8, 64, 1, 1)
    # the model its registry builds has the preset's experts
    moe = cfg.model_spec.model.layers[0].moe if hasattr(cfg.model_spec.model, "layers") else None
    if moe is not None:
        assert moe.num_experts == QWEN.n_experts and moe.router.top_k == QWEN.top_k


# ---- the token dispatcher: torchtitan 0.3.0 chooses it in Python (model_registry(...,
# moe_comm_backend=...)), not on its command line; 0.2.2 has parallelism.
# expert_parallel_comm_backend, read by deepseek_v3 alone -------------------------------------

def _with(c: PlanConfig, **changes) -> PlanConfig:
    return PlanConfig(**{**c.model_dump(), **changes})


@pytest.mark.parametrize("changes,reason", [
    ({"moe_dispatcher": "deepep"}, "config_registry"),
    ({"moe_dispatcher": "allgather"}, "no all-gather"),
    ({"moe_a2a_overlap": True}, "overlapped expert-parallel"),
    # no command-line setting for either: refused rather than dropped from the settings
    ({"moe_capacity_factor": 1.0}, "routes dropless"),
    ({"moe_shared_expert_overlap": True}, "shared experts after the routed"),
])
def test_a_dispatch_torchtitan_cannot_launch_is_refused(changes, reason):
    with pytest.raises(PlanError, match=reason):
        check_config(QWEN, load_hardware("h100-nvlink"), _with(QWEN_EP8, **changes))
    # the all-to-all is accepted (test_expert_parallelism_is_accepted_with_etp_one) and so is
    # the same plan under Megatron's flex dispatcher
    check_config(QWEN, load_hardware("h100-nvlink"),
                 _with(QWEN_EP8, framework="megatron", zero_stage=1, **changes))


def test_the_search_ranks_no_deepep_plan_under_torchtitan():
    from planner.search.core import search
    from planner.search.request import PlanRequest

    hw = load_hardware("h100-nvlink")
    ask = dict(gpus=64, tp=[1], pp=[1], ep=[8], zero=[ZeroStage.GRADIENTS])
    titan = search(QWEN, hw, PlanRequest(framework="torchtitan", **ask), top=50).plans
    assert titan and all(p.config.moe_dispatcher != "deepep" for p in titan)
    for plan in titan[:3]:
        emit("torchtitan", plan.config, QWEN)  # what it ranks, it writes
    # Megatron weighs DeepEP on the same layouts: the mask is torchtitan's rule, not the space's
    megatron = search(QWEN, hw, PlanRequest(framework="megatron", **ask), top=50).plans
    assert any(p.config.moe_dispatcher == "deepep" for p in megatron)


DSV3_EP8 = PlanConfig(dp=64, ep=8, mbs=1, n_micro=16, gbs=1024, seq_len=4096, zero_stage=3,
                      framework="torchtitan", sequence_parallel=False, moe_dispatcher="deepep")


def test_deepep_is_written_for_0_2_deepseek_v3_and_refused_elsewhere():
    text = emit("torchtitan@0.2", DSV3_EP8, DSV3).text
    assert 'expert_parallel_comm_backend = "deepep"' in text
    assert "expert_parallel_comm_backend" not in emit(
        "torchtitan@0.2", _with(DSV3_EP8, moe_dispatcher=None), DSV3).text
    with pytest.raises(PlanError, match="ignores parallelism.expert_parallel_comm_backend"):
        emit("torchtitan@0.2", _with(QWEN_EP8, moe_dispatcher="deepep"), QWEN)
    with pytest.raises(PlanError, match="config_registry"):
        emit("torchtitan", DSV3_EP8, DSV3)


def test_forced_balance_is_written_in_both_releases():
    # torchtitan has it as debug.moe_force_load_balance (0.3.0 config/configs.py DebugConfig,
    # read by models/common/decoder.py; 0.2.2 job_config.py Debug, read by qwen3's args)
    forced = _with(QWEN_EP8, moe_forced_balance=True)
    assert "--debug.moe_force_load_balance \\" in emit("torchtitan", forced, QWEN).text
    assert "[debug]\nmoe_force_load_balance = true" in emit("torchtitan@0.2", forced, QWEN).text
    for fmt in ("torchtitan", "torchtitan@0.2"):
        assert "moe_force_load_balance" not in emit(fmt, QWEN_EP8, QWEN).text


@pytest.mark.parametrize("flags, reason", [
    (["--moe-dispatcher", "deepep"], "torchtitan: DeepEP is chosen inside a config_registry "
     "function"),
    (["--moe-a2a-overlap"], "torchtitan: it has no overlapped expert-parallel communication"),
    (["--moe-capacity-factor", "1.25"], "torchtitan: its MoE routes dropless"),
    (["--moe-shared-expert-overlap"], "torchtitan: its MoE runs the shared experts after"),
])
def test_search_says_first_why_torchtitan_refuses_a_moe_setting(flags, reason):
    # before: DeepEP gave "no layout … vpp=2 needs --schedule interleaved (removed 166,698); …"
    # with the reason third; the a2a overlap ranked expert-parallel-1 plans without a word
    from typer.testing import CliRunner

    from planner.cli import app

    for model, gpus in (("deepseek-v3", "2048"), ("qwen3-30b-a3b", "64")):
        r = CliRunner().invoke(app, ["search", "--model", model, "--gpus", gpus, "--framework",
                                     "torchtitan", *flags])
        assert r.exit_code == 2 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"plan3d: error: {reason}"), lines


def test_the_refusal_is_the_frameworks_not_the_settings():
    from planner.search.diagnosis import moe_settings_refusal
    from planner.search.request import PlanRequest

    hw = load_hardware("h100-nvlink")
    deepep = dict(gpus=64, moe_dispatcher="deepep")
    assert "config_registry" in moe_settings_refusal(QWEN, hw, PlanRequest(
        framework="torchtitan", **deepep))
    # Megatron runs DeepEP, and torchtitan the all-to-all and forced balance: nothing refused
    assert moe_settings_refusal(QWEN, hw, PlanRequest(framework="megatron", **deepep)) is None
    assert moe_settings_refusal(QWEN, hw, PlanRequest(
        gpus=64, framework="torchtitan", moe_dispatcher="alltoall",
        moe_forced_balance=True)) is None
    # a dense model has no MoE settings to refuse
    assert moe_settings_refusal(load_model("8b"), hw, PlanRequest(
        gpus=8, framework="torchtitan", moe_dispatcher="deepep")) is None

