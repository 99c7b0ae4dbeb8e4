"""offload: what moves to host memory (optimizer states, parameters, activations), the bytes it
leaves on the device and the host, and the time its copies and the CPU step add."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import memory as M
from ..formulas import offload as OF
from ..formulas import recompute as RC
from .numbers import Choices, same


def offload_states(x, c: Choices, states, conv, w, g, o):
    """offload: the device's weights, gradients and optimizer bytes after offload, and the host
    bytes they take. The optimizer: a fraction f of its states, with the host gradient buffer the
    CPU step reads (formulas.offload); the parameters (FSDP2 CPUOffloadPolicy, ZeRO-3
    offload_param): all three sharded states, f = 1."""
    f = x.offload_optimizer
    host = OF.host_optimizer_bytes(o, f, states.optimizer_bytes, conv.host_grad_bytes)
    if c.offload_params:
        return 0, 0, OF.device_optimizer_bytes(o, f), host + w + g
    if offloads_grads(c, conv):  # DeepSpeed ZeRO-2/3: the gradient partition goes along
        return w, OF.device_optimizer_bytes(g, f), OF.device_optimizer_bytes(o, f), host + f * g
    return w, g, OF.device_optimizer_bytes(o, f), host


def offloads_grads(c: Choices, conv) -> bool:
    """offload: the framework moves the offloaded parameters' gradient partition to the host with
    their optimizer states (MemoryConventions.offload_grads_from_zero)."""
    return int(c.zero_stage) >= conv.offload_grads_from_zero


def offload_times(x, c: Choices, k: SimpleNamespace, states, psi_o, held_params, zero_rounds,
                  note=same) -> SimpleNamespace:
    """offload: what offload adds to the step (step_s: the offloaded optimizer step, after the
    backward; mb_s: per micro-batch, the copies compute does not hide) and the bytes per step
    each way over the host link. psi_o: the parameters whose optimizer state this GPU holds;
    held_params: the stage's parameters it computes with."""
    f, z, m = x.offload_optimizer, int(c.zero_stage), k.m
    # the optimizer step: f·Ψ_o gradients down, the CPU's Adam, f·Ψ_o weights up (with the
    # parameters on the host the weights stay there: the next forward's gathers fetch them)
    step_d2h = OF.optimizer_d2h_bytes(psi_o * states.optimizer_bytes, f, states.optimizer_bytes,
                                      x.g_bytes)
    step_h2d = 0 if c.offload_params else OF.optimizer_h2d_bytes(
        psi_o * states.optimizer_bytes, f, states.optimizer_bytes, x.w_bytes)
    cpu_s = note("cpu_optimizer_s", OF.cpu_step_s(f * psi_o, x.dram_bw))
    backward_window = k.layers * (k.bwd_s + k.recompute_s)  # the last micro-batch's backward
    mb_d2h = mb_h2d = mb_s = 0
    if c.offload_params:
        # the weight shard up for each gather, the gradient shard down, each ZeRO round
        w = M.state_bytes(held_params, states.weight_bytes, k.d_shard,
                          states.weight_sharded)
        g = M.state_bytes(held_params, states.grad_bytes, k.d_shard, states.grad_sharded)
        mb_h2d, mb_d2h = OF.param_offload_h2d_bytes(w, 2 if z == 3 else 1), g
        step_d2h = 0  # the gradients went down with each round
        mb_s = OF.param_offload_exposed_s(OF.link_time_s(mb_h2d, x.host_bw, x.dram_bw),
                                          OF.link_time_s(mb_d2h, x.host_bw, x.dram_bw),
                                          k.compute_mb_s) * zero_rounds / m
        mb_h2d, mb_d2h = mb_h2d * zero_rounds / m, mb_d2h * zero_rounds / m
    elif offloads_grads(c, c.framework.memory):
        # the offloaded gradient partition goes down each ZeRO round, under its backward; from
        # the second round on, what the host accumulated comes up first to be added on the GPU
        # (DeepSpeed stage_1_and_2.py `async_accumulate_grad_in_cpu_via_gpu` @ edaa72212)
        g = f * M.state_bytes(held_params, states.grad_bytes, k.d_shard, states.grad_sharded)
        up = g * (zero_rounds - 1) / zero_rounds  # per round, averaged over the step's rounds
        mb_d2h, mb_h2d, step_d2h = g * zero_rounds / m, up * zero_rounds / m, 0
        mb_s = OF.param_offload_exposed_s(OF.link_time_s(up, x.host_bw, x.dram_bw),
                                          OF.link_time_s(g, x.host_bw, x.dram_bw),
                                          k.compute_mb_s) * zero_rounds / m
    # the pipelined step's copies and CPU Adam share the host's DRAM
    dram_s = OF.host_dram_step_s(f * psi_o, step_d2h + step_h2d,
                                 c.framework.offload_conversion_bytes, x.dram_bw)
    step_s = note("offload_step_s", OF.optimizer_step_offload_s(
        OF.link_time_s(step_d2h, x.host_bw, x.dram_bw), cpu_s,
        OF.link_time_s(step_h2d, x.host_bw, x.dram_bw), backward_window,
        int(c.framework.offload_pipelined), dram_s))
    # activations: N layers out in the forward and back in the backward, per micro-batch
    n = _ops.minimum(x.offload_activations, k.layers)
    act = OF.activation_offload_bytes(n, k.layer_act)
    copy_s = OF.link_time_s(act, x.host_bw, x.dram_bw)
    if c.framework.memory.host_checkpoints:
        # fit: DeepSpeed cpu_checkpointing: out under the forward, back on demand (blocking
        # both ways with partition_activations; formulas.recompute.cpu_checkpoint_exposed_s)
        act_s = RC.cpu_checkpoint_exposed_s(copy_s, n * k.fwd_s,
                                            0 if c.sequence_parallel else x.distribute)
    else:
        act_s = OF.activation_offload_exposed_s(copy_s, n * k.fwd_s,
                                                n * (k.bwd_s + k.recompute_s))
    mb_s = note("offload_microbatch_s", mb_s + act_s)
    return SimpleNamespace(
        step_s=step_s, mb_s=mb_s,
        d2h_bytes=note("offload_d2h_bytes", step_d2h + m * (mb_d2h + act)),
        h2d_bytes=note("offload_h2d_bytes", step_h2d + m * (mb_h2d + act)))
