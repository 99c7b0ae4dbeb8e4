"""Model-state memory per GPU under ZeRO (Rajbhandari et al. 2020, §5 and Table 1).

Ψ is the number of parameters this GPU's tensor/pipeline shard holds; d is the size of the group
ZeRO shards over (data parallel × context parallel: both hold identical weights). Mixed-precision
Adam keeps, per parameter, the 16-bit weight (2 B), the gradient (2 B in the paper, 4 B in
Megatron-LM's default fp32 main-grad buffer), and K = 12 B of optimizer state (fp32 master copy,
Adam m, Adam v). ZeRO-1 shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 (FSDP) also
the weights:

    stage 0: (w + g + K)Ψ
    stage 1: (w + g)Ψ + KΨ/d
    stage 2: wΨ + (g + K)Ψ/d
    stage 3: (w + g + K)Ψ/d

At w = g = 2, K = 12, Ψ = 7.5·10⁹, d = 64: 120 / 31.4 / 16.6 / 1.88 GB (Table 1).
"""

from __future__ import annotations

# The divisor each model state gets, by ZeRO stage: (weights, gradients, optimizer).
# Stage → which of the three are sharded over the d ranks.
ZERO_SHARDS = {
    0: (False, False, False),
    1: (False, False, True),
    2: (False, True, True),
    3: (True, True, True),
}


def _shard(value, dp_shard, sharded: bool):
    return value / dp_shard if sharded else value


def weight_bytes(params, bytes_per_weight, dp_shard, zero_stage):
    """w·Ψ, divided by d under ZeRO-3."""
    return _shard(bytes_per_weight * params, dp_shard, ZERO_SHARDS[zero_stage][0])


def gradient_bytes(params, bytes_per_grad, dp_shard, zero_stage):
    """g·Ψ, divided by d under ZeRO-2 and ZeRO-3."""
    return _shard(bytes_per_grad * params, dp_shard, ZERO_SHARDS[zero_stage][1])


def optimizer_bytes(params, bytes_per_master, bytes_per_moments, dp_shard, zero_stage):
    """K·Ψ with K = master + moments (4 + 8 = 12 for fp32 Adam), divided by d under ZeRO ≥ 1."""
    return _shard((bytes_per_master + bytes_per_moments) * params, dp_shard,
                  ZERO_SHARDS[zero_stage][2])


def zero3_prefetch_bytes(layer_sharded_params, layer_replicated_params, tp, bytes_per_weight,
                         n_prefetch_layers=2):
    """Under ZeRO-3 a GPU materialises whole layers before using them: the layer being computed and
    the one prefetched (FSDP's default forward/backward prefetch of one unit), 2·w·(layer/t)."""
    return gathered_layers_bytes(layer_gpu_params(layer_sharded_params, layer_replicated_params, tp),
                                 bytes_per_weight, n_prefetch_layers)


def runtime_overhead_bytes(reserved_bytes, fragmentation_fraction, dynamic_bytes):
    """What frameworks add beyond tensors: what the process holds outside the caching allocator
    (CUDA context and NCCL's buffers: formulas/runtime.py, composed per plan in
    model/runtime.py) plus the allocator's slack, a fraction φ of what the step allocates and
    frees (activations, gathered layers, loss buffers; model states sit in buffers allocated
    once): R + φ·dynamic."""
    return reserved_bytes + fragmentation_fraction * dynamic_bytes


def state_bytes(params, bytes_per_param, dp_shard, sharded: bool):
    """One model state: bytes·Ψ, divided by d where the framework shards it (the ZeRO stages
    above are this with the stage's choice of which states are sharded)."""
    return _shard(bytes_per_param * params, dp_shard, sharded)


def layer_gpu_params(layer_sharded_params, layer_replicated_params, tp):
    """One layer's parameters on one GPU: the tensor-parallel part over t plus the replicated
    norms and biases."""
    return layer_sharded_params / tp + layer_replicated_params


def gathered_layers_bytes(layer_params, bytes_per_param, n_layers):
    """n whole layers materialised at once under ZeRO-3 / FSDP (the one computed and those
    prefetched; or a layer's reduce-scatter input in the backward): n·bytes·(layer/t)."""
    return n_layers * bytes_per_param * layer_params


def unsharded_stage_bytes(params, bytes_per_param):
    """A whole stage's parameters (or gradients) held unsharded, bytes·Ψ_stage: FSDP2 under
    pipeline parallelism keeps the weights gathered and accumulates gradients unsharded until the
    last micro-batch (torch.distributed.pipelining stage.py backward_maybe_with_nosync)."""
    return bytes_per_param * params
