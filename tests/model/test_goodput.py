"""Goodput from failures and checkpoints (model/goodput.py): hand-derived cases at 1,024 and
16,384 GPUs, what each framework's checkpoint holds, the plan and budget carrying it, the
cluster's figures given by the user."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from planner.catalog import hardware_presets, load_hardware, load_model
from planner.errors import PlanError
from planner.formulas.choices import ZeroStage
from planner.frameworks import FRAMEWORKS
from planner.model.estimate import estimate, with_budget
from planner.model.goodput import goodput_at, goodput_costs
from planner.schema import PlanConfig
from planner.search.request import PlanRequest

LAMBDA = 419 / (54 * 24 * 16384)  # Llama 3 §3.3.4 text: 1.97328e-5 interruptions per GPU-hour


def _costs(n_gpus, framework="megatron", params=70e9):
    c = SimpleNamespace(framework=FRAMEWORKS[framework], zero_stage=ZeroStage.OPTIMIZER,
                        adam_moments="fp32")
    x = SimpleNamespace(dp=n_gpus, g_bytes=4, fail_rate=LAMBDA, restart=600.0,
                        ckpt_write_bw=0.078e9, ckpt_read_bw=0.156e9)
    k = SimpleNamespace(t=1, p=1, cp=1, n_params=params)
    return goodput_costs(x, c, k)


def test_goodput_by_hand_at_1024_gpus():
    g = _costs(1024)
    # Megatron's checkpoint: (2 + 12)·70e9 = 9.8e11 B; written by 1,024 GPUs at 0.078 GB/s each
    # (the SuperPOD RA "Better" tier per GPU): δ = 9.8e11 / (1,024 · 7.8e7) = 9.8e11 / 7.9872e10
    # = 12.26963 s; read back at 0.156 GB/s: 6.13482 s, so T_restart = 600 + 6.13482 = 606.1348 s
    assert g.checkpoint_bytes == pytest.approx(9.8e11)
    assert g.checkpoint_write_s == pytest.approx(12.26963, rel=1e-6)
    assert g.restart_s == pytest.approx(606.1348, rel=1e-6)
    # M = 3600 / (1,024 · 1.97328e-5) = 54·24·3600·16 / 419 = 178,161.34 s (0.485 a day)
    assert g.mtbf_s == pytest.approx(178_161.34, rel=1e-6)
    assert g.interruptions_per_day == pytest.approx(419 / 54 / 16, rel=1e-9)
    # Daly: 2δM = 4,371,947.9, √ = 2,090.920; δ/(2M) = 3.44340e-5, √ = 5.86805e-3;
    # τ = 2,090.920 · (1 + 5.86805e-3/3 + 3.44340e-5/9) − 12.2696 = 2,090.920 · 1.0019598
    #   − 12.2696 = 2,082.749 s
    assert g.checkpoint_interval_s == pytest.approx(2082.749, rel=1e-6)
    # G = τ/(τ + δ) · (1 − (R + (τ + δ)/2)/M) = 2,082.749/2,095.018 · (1 − (606.135 + 1,047.509)
    #   / 178,161.34) = 0.9941434 · (1 − 0.0092817) = 0.984916
    assert g.goodput == pytest.approx(0.984916, rel=1e-5)


def test_goodput_by_hand_at_16384_gpus():
    g = _costs(16384)
    # 16 times the GPUs: δ = 12.26963/16 = 0.766852 s, the read 0.383426 s, M = 178,161.34/16 =
    # 11,135.08 s; δ/(2M) is unchanged (both shrink 16-fold) and √(2δM) shrinks √256 = 16-fold:
    # τ = (2,090.920/16)·1.0019598 − 0.766852 = 130.6825·1.0019598 − 0.766852 = 130.1718 s
    assert g.checkpoint_write_s == pytest.approx(0.766852, rel=1e-5)
    assert g.mtbf_s == pytest.approx(11_135.08, rel=1e-6)
    assert g.checkpoint_interval_s == pytest.approx(130.1718, rel=1e-5)
    # G = 130.1718/130.9387 · (1 − (600.3834 + 65.4693)/11,135.08) = 0.9941434 · (1 − 0.0597977)
    #   = 0.934696: the restart, not the checkpoint, costs a 16K-GPU job its goodput
    assert g.goodput == pytest.approx(0.934696, rel=1e-5)
    assert g.goodput < _costs(1024).goodput


def test_each_framework_checkpoint_holds_weights_and_optimizer_once():
    # Megatron: bf16 weights + fp32 master, m, v = 14 B/param; torchtitan's DCP: fp32 weights
    # + m, v = 12; DeepSpeed: bf16 module + fp32 master, m, v = 14 (its fp32 gradient copy,
    # counted in its memory, is not saved)
    for framework, per_param in (("megatron", 14), ("torchtitan", 12), ("deepspeed", 14)):
        assert _costs(1024, framework).checkpoint_bytes == pytest.approx(per_param * 70e9)


@pytest.fixture(scope="module")
def plan():
    model, hw = load_model("70b"), load_hardware("h100-nvlink")
    config = PlanConfig(dp=32, tp=8, pp=4, mbs=1, n_micro=16, gbs=512, seq_len=8192)
    return estimate(model, hw, config)


def test_plan_carries_its_goodput(plan):
    g = plan.goodput
    # the plan's own parameters, 14 B each, over its 1,024 GPUs at the profile's storage
    assert g.checkpoint_bytes == pytest.approx(14 * plan.model.n_params)
    assert g.checkpoint_write_s == pytest.approx(g.checkpoint_bytes / (1024 * 0.078e9))
    assert g.failures_per_gpu_hour == pytest.approx(LAMBDA, rel=1e-3)
    assert 0.98 < g.fraction < 0.99
    # the budget divides by it: days = T / (τ · G)
    b = with_budget(plan, 15e12).budget
    assert b.goodput == g.fraction and b.goodput_from == "model"
    assert b.days == pytest.approx(15e12 / (plan.time.tokens_per_s * g.fraction) / 86_400)
    # before the layout is known (search --deadline-days) the same within the vocabulary's
    # padding
    assert goodput_at(load_model("70b"), load_hardware("h100-nvlink"), "megatron",
                      1024) == pytest.approx(g.fraction, abs=1e-4)


def test_the_users_cluster_figures_replace_the_profiles(plan):
    hw = load_hardware("h100-nvlink")
    req = PlanRequest(gpus=1024, failures_per_gpu_hour=2 * LAMBDA, restart_s=300,
                      storage_write_gb_per_s_per_gpu=1.0)
    mine = estimate(load_model("70b"), req.cluster(hw), plan.config).goodput
    assert mine.mtbf_s == pytest.approx(plan.goodput.mtbf_s / 2)
    assert mine.checkpoint_write_s == pytest.approx(plan.goodput.checkpoint_write_s * 0.078)
    # the read keeps the profile's bandwidth; the relaunch is the user's 300 s
    assert mine.restart_s == pytest.approx(plan.goodput.restart_s - 300)
    assert PlanRequest(gpus=8).cluster(hw) is hw


def test_no_time_to_train_is_refused(plan):
    hw = load_hardware("h100-nvlink")
    # one interruption a GPU-hour on 1,024 GPUs: M = 3.5 s, less than the restart
    hopeless = estimate(load_model("70b"), PlanRequest(gpus=1024, failures_per_gpu_hour=1)
                        .cluster(hw), plan.config)
    assert hopeless.goodput.fraction == 0
    with pytest.raises(PlanError, match="no time to train"):
        with_budget(hopeless, 15e12)
    # --goodput still answers
    assert with_budget(hopeless, 15e12, goodput=0.5).budget.goodput == 0.5


@pytest.mark.parametrize("name", hardware_presets())
def test_every_profile_states_its_storage(name):
    storage = load_hardware(name).storage
    assert storage is not None and 0.01 < storage.write_gb_per_s_per_gpu < 1
