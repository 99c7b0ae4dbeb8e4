"""What a training process holds beside its tensors, for one plan: the CUDA context, the GEMM
workspaces, and NCCL's buffers for each communicator the rank uses — counted from the plan's
groups (formulas/runtime.py, with each constant's source).

A rank holds one communicator per process group it runs collectives on (PyTorch creates one per
group; NCCL connects it on first use): tensor, context and data parallelism (the shard group and,
under hybrid sharding, the replicas), the expert-data-parallel group of a MoE model, and those the
framework adds (the world; Megatron's model-parallel and embedding groups).  Each collective
communicator of more than one rank keeps one connection's FIFOs per ring channel, plus NVLS
buffers where the switch has NVLS and the group has more than one GPU in the domain.  Pipeline
neighbours and an NCCL all-to-all's peers keep point-to-point FIFOs per peer, over NVLink or the
network.  CUDA graph pools are not counted: no launch setting plan3d writes captures graphs."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import moe as MO
from ..formulas import runtime as RT
from ..formulas.choices import ZeroStage
from ..formulas.moe_layer import Dispatcher
from .numbers import Choices, any_row, same


def in_group(size):
    """1 where a group of `size` ranks has more than one (a group of one never connects)."""
    return 1 - _ops.le(size, 1)


def framework_groups(x, c: Choices, k: SimpleNamespace) -> list:
    """The sizes of the process groups the framework adds to the parallel ones, by name
    (frameworks' MemoryConventions.communicators): the world; the model-parallel group t·p that
    a plan without the distributed optimizer reduces gradient statistics over (Megatron-Core
    optimizer/optimizer.py get_grad_stats_parallel_group @ d98e8a64: the distributed optimizer
    uses the world); the two-rank embedding group of a tied model's first and last stages."""
    world = x.dp * k.t * k.p * k.cp
    sizes = {
        "world": world,
        "model_parallel": int(c.zero_stage == ZeroStage.NONE) * k.t * k.p,
        "embedding": in_group(k.p) * x.tied * 2,
    }
    return [sizes[name] for name in c.framework.memory.communicators]


def collective_communicators(x, c: Choices, k: SimpleNamespace) -> tuple:
    """(number of collective communicators of more than one rank, Σ NVLS heads over them)."""
    g = k.links
    groups = [(k.t, g.tp.r), (k.cp, g.cp.r), (k.d_shard, g.dp.r)]
    if g.replica is not None:  # hybrid sharding: the replicas' all-reduce
        groups.append((x.dp_replicate, g.replica.r))
    if any_row(x.moe):  # moe: the expert gradients' reduction over edp ranks
        edp = MO.expert_data_parallel(x.dp, k.cp, k.t, x.ep, x.etp)
        groups.append((x.moe * edp, 1))
    groups += [(size, 1) for size in framework_groups(x, c, k)]
    count = sum(in_group(size) for size, _ in groups)
    heads = sum(in_group(size) * in_group(r) * _ops.minimum(r, RT.NVLS_MAX_HEADS)
                for size, r in groups)
    return count, heads


def p2p_bytes(x, c: Choices, k: SimpleNamespace):
    """Point-to-point FIFOs: the pipeline's neighbours (one at p = 2, two above), over NVLink
    where adjacent stages share a domain, else the network; an NCCL all-to-all's ep − 1 peers
    (moe, Megatron's alltoall dispatcher and torchtitan's EP; DeepEP keeps its own buffers)."""
    pp_peers = _ops.minimum(k.p - 1, 2)
    pp_inside = k.links.pp.inside
    total = pp_peers * (pp_inside * x.p2p_nvl + (1 - pp_inside) * x.p2p_net)
    if any_row(x.moe) and c.moe_dispatcher is not Dispatcher.ALL_GATHER:
        # the search's candidates may dispatch by DeepEP row by row (x.deepep)
        nccl_a2a = 0 if c.moe_dispatcher is Dispatcher.DEEPEP else 1 - x.deepep
        total = total + x.moe * nccl_a2a * (x.ep - 1) * (
            k.ep_inside * x.p2p_nvl + (1 - k.ep_inside) * x.p2p_net)
    return total


def runtime_holdings(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """The runtime's holdings on one GPU: outside the caching allocator (context, NCCL) and
    inside it (GEMM workspaces, allocated once, with no allocator slack on them)."""
    n_comms, heads = collective_communicators(x, c, k)
    nccl = note("nccl_bytes", RT.nccl_collective_bytes(x.nccl_ch, x.nccl_conn, n_comms)
                + heads * x.nvls_head + p2p_bytes(x, c, k))
    workspaces = note("workspace_bytes",
                      x.ws_torch + c.framework.memory.te_workspaces * x.ws_te)
    return SimpleNamespace(outside=x.ctx + nccl, workspaces=workspaces)
