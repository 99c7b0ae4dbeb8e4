"""Memory of the most loaded stage, as the plan's framework lays it out: the model states
(weights, gradients, optimizer) sharded by the ZeRO stage, the buffers the framework holds beside
them, the activations, the allocator's slack, what the runtime holds beside the tensors
(model/runtime.py); on the pipeline rank that needs the most: the first, the last, or a middle
rank that holds more MoE layers (formulas/memory.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import memory as M
from ..formulas import moe as MO
from ..formulas import offload as OF
from ..formulas import pipeline as PL
from ..formulas import quantization as Q
from ..formulas import recompute as RC
from ..formulas.choices import Recompute
from .numbers import Choices, any_row, may_be_nonzero, model_states, same
from .offload import offload_states
from .runtime import runtime_holdings


def param_gather_bytes(x, conv) -> float:
    """fit: bytes per linear parameter of a weight kept and gathered quantised (--fp8-param-
    gather): Transformer Engine's quantised parameter with its copies (w_copy); torchao's fp8
    all-gather sends the 1-byte data alone (torchao/float8/fsdp_utils.py @ 36027d8)."""
    return x.w_copy if conv.quantized_weight_cache else 1.0


def quantized_weight_bytes(x, c: Choices, k: SimpleNamespace, shards):
    """fit: the quantised copies of the linear weights a framework caches (Transformer Engine,
    across a step's micro-batches; not the embedding or the head): for every layer of the stage,
    or under ZeRO-3 only for the gathered layers, whose copy is cast from the gathered 16-bit
    weight and freed with it (formulas.quantization.weight_cache_bytes); none where the copies
    are the parameters (--fp8-param-gather).  Plus delayed scaling's amax histories."""
    conv = c.framework.memory
    if not conv.quantized_weight_cache or not may_be_nonzero(x.fp8):
        return 0
    held_layers = k.layers
    if int(c.zero_stage) == 3:
        held_layers = _ops.select(shards, conv.gathered_layers, k.layers)
    copies = Q.weight_cache_bytes(k.layer_sharded / k.t, held_layers, x.w_copy)
    return x.fp8 * ((1 - x.param_gather) * copies
                    + x.amax * Q.amax_history_bytes(Q.LINEARS_PER_LAYER * k.layers))


def held_buffers(x, c: Choices, k: SimpleNamespace, psi, ends, psi_e=0, edp=1):
    """What the framework holds beside the model states and activations, for a stage of psi
    parameters per GPU with `ends` embedding/head matrices: gathered ZeRO-3 layers, weights and
    gradients kept unsharded across a pipelined step, fixed buckets, fp8 weight copies. moe:
    the stage's psi_e routed-expert parameters, sharded over their own edp group, are held
    unsharded alike (torchtitan's apply_fsdp shards `moe.experts` over the edp mesh with the
    block's reshard_after_forward, so ZeRO-2 keeps them gathered and a pipelined step keeps
    them and their gradients whole)."""
    conv, z, t = c.framework.memory, int(c.zero_stage), k.t
    # data-parallel sharding on one rank falls back to no sharding (FSDP's NO_SHARD)
    shards = 1 - _ops.le(k.d_shard, 1)
    single_stage = _ops.le(k.p, 1)
    layer_w = M.layer_gpu_params(k.layer_sharded, k.layer_replicated, t)
    end_w = k.vocab_padded * x.hidden / t  # the embedding or the LM head on one GPU
    pp_w, pp_g = conv.pp_unsharded
    held = conv.bucket_bytes(c.zero_stage) + quantized_weight_bytes(x, c, k, shards)
    if z == 3:
        # the layer computed and those prefetched; under pp > 1 where the framework keeps the
        # stage gathered, the whole stage instead (fit: --fp8-param-gather gathers the linear
        # weights quantised)
        gathered = M.gathered_layers_bytes(layer_w, x.w_bytes, conv.gathered_layers)
        if may_be_nonzero(x.param_gather):
            gathered = gathered - x.fp8 * x.param_gather * M.gathered_layers_bytes(
                k.layer_sharded / t, x.w_bytes - param_gather_bytes(x, conv),
                conv.gathered_layers)
        whole = M.unsharded_stage_bytes(psi, pp_w)
        held = held + shards * (_ops.select(single_stage, gathered,
                                            _ops.maximum(gathered, whole))
                                + int(conv.head_unsharded) * ends * x.w_bytes * end_w
                                + M.gathered_layers_bytes(layer_w, x.g_bytes,
                                                          conv.reduce_buffer_layers))
    # moe: the routed experts where their edp group shards them (0 for a dense model)
    shards_e = 1 - _ops.le(edp, 1) if any_row(x.moe) else 0

    def whole(per_param):  # the stage's dense and expert parameters held unsharded
        return (shards * M.unsharded_stage_bytes(psi, per_param)
                + shards_e * M.unsharded_stage_bytes(psi_e, per_param))

    if z == 3:
        held = held + shards_e * (1 - single_stage) * M.unsharded_stage_bytes(psi_e, pp_w)
    if z == 2 and conv.zero2_keeps_weights_gathered:
        held = held + whole(x.w_bytes)
    if z >= 2:
        held = held + (1 - single_stage) * whole(pp_g)
    return held


def stage_bytes(x, c: Choices, k: SimpleNamespace, psi, act, ends, psi_e=0, act_host=0):
    """One stage's (weights, gradients, optimizer, activations, overhead with the buffers,
    allocated, reserved, host) bytes per GPU, for psi parameters (psi_e routed experts) and `act`
    activation bytes on the device (act_host on the host); without what the runtime holds beside
    the tensors, the same on every stage (added by stage_memory)."""
    conv = c.framework.memory
    states = model_states(c, x.g_bytes)
    d_shard = k.d_shard
    # moe: expert states are sharded over the expert-data-parallel group edp = d·c·t/(ep·etp)
    edp = MO.expert_data_parallel(x.dp, k.cp, k.t, x.ep, x.etp)
    # the model states (weights, gradients, optimizer) as the framework keeps them; DualPipe
    # holds two copies of its stages (DeepSeek-V3 report, Table 2)
    psi, psi_e = psi * k.param_copies, psi_e * k.param_copies
    w = M.state_bytes(psi, states.weight_bytes, d_shard, states.weight_sharded)
    if conv.quantized_weight_cache and may_be_nonzero(x.param_gather):
        # fit: --fp8-param-gather, the linear weights stored quantised, no 16-bit copy
        w = w - x.fp8 * x.param_gather * M.state_bytes(
            k.layers * k.layer_sharded / k.t * k.param_copies, states.weight_bytes - x.w_copy,
            d_shard, states.weight_sharded)
    g = M.state_bytes(psi, states.grad_bytes, d_shard, states.grad_sharded)
    o = M.state_bytes(psi, states.optimizer_bytes, d_shard, states.optimizer_sharded)
    if any_row(x.moe):  # moe: the stage's routed experts (psi_e per GPU after ep·etp), over edp
        w = w + M.state_bytes(psi_e, states.weight_bytes, edp, states.weight_sharded)
        g = g + M.state_bytes(psi_e, states.grad_bytes, edp, states.grad_sharded)
        o = o + M.state_bytes(psi_e, states.optimizer_bytes, edp, states.optimizer_sharded)
    host = act_host
    if c.offload:  # offload: the states that move to host memory leave the device
        w, g, o, host_states = offload_states(x, c, states, conv, w, g, o)
        host = host + host_states
    held = held_buffers(x, c, k, psi, ends, psi_e, edp)
    allocated = w + g + o + act + held
    frag = x.frag if conv.fragmentation is None else conv.fragmentation
    # the allocator's slack is on what the step allocates and frees, not on the model states,
    # which sit in buffers allocated once
    slack = frag * (act + held)
    return w, g, o, act, slack + held, allocated, allocated + slack, host


def checkpoint_holdings(x, c: Choices, k: SimpleNamespace):
    """fit: what DeepSpeed's checkpoint options hold beside the stage's checkpoints, as (device,
    host) bytes: under `cpu_checkpointing` (offload_activations on a framework that offloads its
    checkpoints) the inputs its asynchronous engine keeps on the GPU; under
    `contiguous_memory_optimization` the buffers allocated ahead for number_checkpoints =
    ⌈L/g⌉ checkpoints (Megatron-DeepSpeed's), on the host with cpu_checkpointing
    (formulas.recompute)."""
    conv = c.framework.memory
    if c.recompute is not Recompute.FULL or not conv.host_checkpoints:
        return 0, 0
    on_host = int(c.offload) * _ops.minimum(x.offload_activations, 1)
    distributed = x.distribute if not c.sequence_parallel else 0
    resident = on_host * RC.cpu_checkpoint_resident_bytes(k.checkpoint_bytes, distributed)
    extra = 0
    if may_be_nonzero(getattr(x, "contiguous", 0)):
        extra = x.contiguous * distributed * RC.contiguous_checkpoint_extra_bytes(
            _ops.ceil(x.n_layers / x.recompute_group), k.checkpoints, k.checkpoint_bytes)
    return resident + (1 - on_host) * extra, on_host * extra


def rank_bytes(x, c: Choices, k: SimpleNamespace, psi, act, inflight, ends, psi_e):
    """stage_bytes of one pipeline rank with `inflight` micro-batches in flight: under offload
    N layers' activations of each micro-batch in flight on the host (at most the stage's
    layers: DeepSpeed's cpu_checkpointing moves every checkpoint), plus DeepSpeed's checkpoint
    holdings."""
    act_host = 0
    if c.offload:  # offload
        n_off = _ops.minimum(x.offload_activations, k.layers)
        act_host = OF.activation_offload_saved_bytes(n_off, k.layer_act, inflight)
        act = act - act_host
    ckpt_device, ckpt_host = checkpoint_holdings(x, c, k)  # fit: DeepSpeed's checkpoint options
    return stage_bytes(x, c, k, psi, act + ckpt_device, ends, psi_e, act_host + ckpt_host)


def stage_memory(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """The most loaded GPU's memory, part by part: the pipeline's first rank, its last, or
    (moe) a middle rank holding more MoE layers (parameters.split_moe_layers), whichever needs
    the most; `rank` is its pipeline rank and `kind` 0 first, 1 last, 2 middle."""
    first_ends = _ops.select(_ops.maximum(k.single_stage, PL.ends_on_first_gpu(c.schedule)),
                             2 - x.tied, 1)
    first = rank_bytes(x, c, k, k.params_first, k.act_first, k.inflight_first, first_ends,
                       k.expert_first)
    last = rank_bytes(x, c, k, k.params_last, k.act_last, k.inflight_last, first_ends,
                      k.expert_last)
    is_first = _ops.le(sum(last[:5]), sum(first[:5]))  # 1 where the first stage is the most loaded
    worst = [_ops.select(is_first, f_, l_) for f_, l_ in zip(first, last)]
    rank = _ops.select(is_first, 0, k.p - 1)
    kind = 1 - is_first
    stage_params = _ops.select(is_first, k.params_first, k.params_last)
    stage_experts = _ops.select(is_first, k.expert_first, k.expert_last)  # moe
    inflight = _ops.select(is_first, k.inflight_first, k.inflight_last)
    costed = [(0, first), (k.p - 1, last)]  # each costed rank's parts, for the tests
    for r in k.middle:  # moe: a middle rank that holds more, where the plan has it
        mid = rank_bytes(x, c, k, r.params, r.act, r.inflight, 0, r.experts)
        costed.append((r.rank * r.valid, mid))
        more = r.valid * (1 - _ops.le(sum(mid[:5]), sum(worst[:5])))
        worst = [_ops.select(more, m_, w_) for m_, w_ in zip(mid, worst)]
        rank, kind = _ops.select(more, r.rank, rank), _ops.select(more, 2, kind)
        stage_params = _ops.select(more, r.params, stage_params)
        stage_experts = _ops.select(more, r.experts, stage_experts)
        inflight = _ops.select(more, r.inflight, inflight)
    # what the runtime holds beside the tensors, the same on every stage: the CUDA context and
    # NCCL's buffers outside the allocator, the GEMM workspaces inside it (allocated once, no
    # slack on them)
    rt = runtime_holdings(x, c, k, note)
    worst[4] = worst[4] + rt.outside + rt.workspaces
    worst[5], worst[6] = worst[5] + rt.workspaces, worst[6] + rt.workspaces
    stage_params = note("stage_params", stage_params)
    if any_row(x.moe):  # moe: the expert parameters per GPU, shown for MoE models
        stage_experts = note("expert_stage_params", stage_experts)
    weights = note("weights_bytes", worst[0])
    grads = note("gradients_bytes", worst[1])
    optimizer = note("optimizer_bytes", worst[2])
    activations = note("activations_bytes", worst[3])
    overhead = note("overhead_bytes", worst[4])
    return SimpleNamespace(
        is_first=is_first, rank=rank, kind=kind, inflight=inflight, costed=costed,
        stage_params=stage_params,
        stage_experts=stage_experts,
        weights=weights, grads=grads, optimizer=optimizer, activations=activations,
        overhead=overhead,
        total_bytes=note("total_bytes", weights + grads + optimizer + activations + overhead),
        allocated_bytes=worst[5], reserved_bytes=worst[6],
        host_bytes=note("host_bytes", worst[7]) if c.offload else 0)  # offload
