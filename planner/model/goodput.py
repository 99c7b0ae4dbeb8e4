"""Goodput: the share of the wall clock that trains, once failures, checkpoints and restarts take
theirs (formulas/reliability.py). The job's N GPUs fail together at N times the cluster's rate per
GPU; the framework's checkpoint (its weights and optimizer state, each parameter once) is written
by every GPU at once at its share of the storage's bandwidth, every Young/Daly interval, and read
back the same way after each restart."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import reliability as R
from ..frameworks import FRAMEWORKS
from ..schema import HardwareProfile, ModelSpec
from .numbers import Choices, model_states, reliability_numbers, same


def goodput_costs(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """The checkpoint's size, its write time, the job's mean time between interruptions, the
    restart (with the checkpoint's read), the optimal checkpoint interval and the goodput."""
    n_gpus = x.dp * k.t * k.p * k.cp
    states = model_states(c, x.g_bytes)
    size = note("checkpoint_bytes", R.checkpoint_bytes(k.n_params, states.saved_bytes))
    write = note("checkpoint_write_s", R.checkpoint_write_s(size, n_gpus, x.ckpt_write_bw))
    mtbf = note("mtbf_s", R.mtbf_s(n_gpus, x.fail_rate))
    restart = note("restart_s", x.restart + R.checkpoint_load_s(size, n_gpus, x.ckpt_read_bw))
    interval = note("checkpoint_interval_s", R.young_daly_interval_s(write, mtbf))
    return SimpleNamespace(
        checkpoint_bytes=size, checkpoint_write_s=write, mtbf_s=mtbf, restart_s=restart,
        checkpoint_interval_s=interval,
        interruptions_per_day=R.interruptions_per_day(n_gpus, x.fail_rate),
        goodput=note("goodput", R.goodput(interval, write, restart, mtbf)))


def goodput_at(model: ModelSpec, hw: HardwareProfile, framework: str, n_gpus: int) -> float:
    """The goodput of a plan on n_gpus before its layout is known (search --deadline-days): the
    same terms with the model's parameters and the framework's default ZeRO stage; the layout
    changes none of them but the vocabulary's padding."""
    from ..formulas.choices import ZeroStage

    fw = FRAMEWORKS[framework]
    c = SimpleNamespace(framework=fw, zero_stage=ZeroStage(int(fw.defaults["zero"])),
                        adam_moments="fp32")
    x = SimpleNamespace(dp=n_gpus, g_bytes=fw.grad_bytes(4), **reliability_numbers(hw))
    k = SimpleNamespace(t=1, p=1, cp=1, n_params=model.n_params)
    return float(goodput_costs(x, c, k).goodput)
