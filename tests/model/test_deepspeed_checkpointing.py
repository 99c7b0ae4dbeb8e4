"""fit: DeepSpeed's activation-checkpointing options (runtime/activation_checkpointing/
checkpointing.py and offload_activations.py @ edaa722), costed: partition_activations
(--distribute-saved-activations), cpu_checkpointing (--offload-activations, every checkpoint),
contiguous_memory_optimization with number_checkpoints (--contiguous-checkpoints), and the
formulas behind them, hand-derived."""

from __future__ import annotations

import json

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.formulas import offload as OF
from planner.formulas import recompute as RC
from planner.frameworks.emit import emit
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.schema import PlanConfig

MiB = 2**20
H100 = load_hardware("h100-nvlink")
M70 = load_model("70b")
# 70B on one stage, tp 8 without sequence parallelism, full recompute: each layer keeps its input,
# 2 B · 8192 · 8192 = 128 MiB (16 MiB partitioned over 8); 16 micro-batches one after the other
BASE = dict(dp=8, tp=8, pp=1, mbs=1, n_micro=16, gbs=128, seq_len=8192, zero_stage=1,
            recompute="full", sequence_parallel=False, framework="deepspeed")


def noted(**kw):
    config = PlanConfig(**{**BASE, **kw})
    seen = {}

    def note(name, value):
        seen[name] = value
        return value

    x = numbers(M70, H100, config)
    plan_costs(x, Choices.of(config), note)
    return x, seen


def test_formulas_hand():
    # the gather before a partitioned checkpoint's rerun: (t − 1)/t · 2sbh = 7/8 · 128 MiB
    assert RC.checkpoint_gather_volume_bytes(8192, 1, 8192, 8, 1) == 112 * MiB
    # asynchronous cpu_checkpointing: copies out under a 3 s forward, back on demand: a 2 s copy
    # costs max(0, 2 − 3) + 2 = 2 s, a 5 s copy 2 + 5 = 7 s; blocking (partitioned): 2·T_copy
    assert RC.cpu_checkpoint_exposed_s(2.0, 3.0, 0) == 2.0
    assert RC.cpu_checkpoint_exposed_s(5.0, 3.0, 0) == 7.0
    assert RC.cpu_checkpoint_exposed_s(2.0, 3.0, 1) == 4.0
    # the engine keeps the newest input and the one before it on the GPU: 2 · 128 MiB; none
    # when partitioned (blocking copies, no engine)
    assert RC.cpu_checkpoint_resident_bytes(128 * MiB, 0) == 256 * MiB
    assert RC.cpu_checkpoint_resident_bytes(128 * MiB, 1) == 0
    # contiguous buffers: number_checkpoints 80 against a stage's 40: 40 · 16 MiB more
    assert RC.contiguous_checkpoint_extra_bytes(80, 40, 16 * MiB) == 640 * MiB
    # uniform groups per chunk: 8 layers, 2 chunks, groups of 3: 2·⌈4/3⌉ = 4; one chunk ⌈8/3⌉
    assert RC.grouped_checkpoints(8, 3, 2) == 4
    assert RC.grouped_checkpoints(8, 3) == 3


def test_cpu_checkpointing_moves_every_checkpoint_and_keeps_two():
    _, on_gpu = noted()
    x, host = noted(offload_activations=80)
    # 80 inputs of 128 MiB leave the device (one micro-batch in flight), 2 stay: 78 · 128 MiB
    # less activation memory; the host holds all 80 (10 GiB)
    assert float(on_gpu["activations_bytes"]) - float(host["activations_bytes"]) == 78 * 128 * MiB
    assert float(host["host_bytes"]) == 80 * 128 * MiB
    # the copies: out under the 80 layers' forward, back on demand in the backward
    copy = OF.link_time_s(80 * 128 * MiB, x.host_bw, x.dram_bw)
    fwd = 80 * float(host["forward_layer_s"])
    assert float(host["offload_microbatch_s"]) == pytest.approx(max(0.0, copy - fwd) + copy)
    # partitioned: 16 MiB each, both copies blocking, nothing resident
    x, both = noted(offload_activations=80, distribute_saved_activations=True)
    copy = OF.link_time_s(80 * 16 * MiB, x.host_bw, x.dram_bw)
    assert float(both["offload_microbatch_s"]) == pytest.approx(2 * copy)
    assert float(both["host_bytes"]) == 80 * 16 * MiB


def test_partitioned_checkpoints_are_gathered_before_their_rerun():
    x, whole = noted()
    _, split = noted(distribute_saved_activations=True)
    # 80 all-gathers per micro-batch, each 112 MiB = 117,440,512 B over the NVLink tp group at
    # its 370 GB/s bus bandwidth (h100-nvlink) plus 7 ring steps of 1 µs: 317.4 + 7 = 324.4 µs
    assert x.fast_bw == 370e9 and x.fast_lat == 1e-6
    gather = float(split["checkpoint_gather_microbatch_s"])
    assert gather == pytest.approx(80 * (117_440_512 / 370e9 + 7e-6), rel=1e-12)
    # on TP's exposed time, for each of the 16 micro-batches
    assert float(split["tp_exposed_s"]) - float(whole["tp_exposed_s"]) == pytest.approx(
        16 * gather, rel=1e-9)
    # and 80 · (128 − 16) MiB = 8,960 MiB fewer checkpoint bytes
    assert float(whole["activations_bytes"]) - float(split["activations_bytes"]) == 8960 * MiB


def test_contiguous_buffers_cost_the_checkpoints_a_stage_does_not_use():
    # pp 2 (ZeRO-1 under the pipeline engine): 40 layers a stage, number_checkpoints = 80
    kw = dict(pp=2, dp=4, distribute_saved_activations=True)
    _, plain = noted(**kw)
    _, cont = noted(contiguous_checkpoints=True, **kw)
    assert float(cont["activations_bytes"]) - float(plain["activations_bytes"]) == 40 * 16 * MiB
    # with cpu_checkpointing the buffers are on the host
    _, cont_host = noted(contiguous_checkpoints=True, offload_activations=40, **kw)
    _, plain_host = noted(offload_activations=40, **kw)
    assert float(cont_host["host_bytes"]) - float(plain_host["host_bytes"]) == 40 * 16 * MiB
    assert float(cont_host["activations_bytes"]) == float(plain_host["activations_bytes"])


def test_refusals():
    with pytest.raises(ValueError, match="distribute_saved_activations"):
        PlanConfig(**BASE, contiguous_checkpoints=True)
    with pytest.raises(PlanError, match="every checkpointed layer input"):
        estimate(M70, H100, PlanConfig(**BASE, offload_activations=40))
    with pytest.raises(PlanError, match="recompute"):
        estimate(M70, H100, PlanConfig(**{**BASE, "recompute": "selective"},
                                       offload_activations=80))
    with pytest.raises(PlanError, match="DeepSpeed"):
        estimate(M70, H100, PlanConfig(**{**BASE, "framework": "megatron"},
                                       distribute_saved_activations=True,
                                       contiguous_checkpoints=True))


def test_emitted_config_writes_what_was_costed():
    c = PlanConfig(**BASE, distribute_saved_activations=True, offload_activations=80,
                   contiguous_checkpoints=True)
    out = emit("deepspeed", c, M70)
    block = json.loads(out.text)["activation_checkpointing"]
    assert block["partition_activations"] is True
    assert block["cpu_checkpointing"] is True
    assert block["contiguous_memory_optimization"] is True
    assert block["number_checkpoints"] == 80
    assert "offload_optimizer" not in json.loads(out.text)["zero_optimization"]
    args = next(n for n in out.notes if n.startswith("Megatron-DeepSpeed args"))
    for flag in ("--partition-activations", "--contigious-checkpointing", "--checkpoint-in-cpu"):
        assert flag in args
    plain = json.loads(emit("deepspeed", PlanConfig(**BASE), M70).text)
    assert plain["activation_checkpointing"]["partition_activations"] is False
    assert plain["activation_checkpointing"]["cpu_checkpointing"] is False
