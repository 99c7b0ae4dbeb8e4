"""Activations, as the plan's framework saves them: a layer's saved bytes under its recompute
mode (dense, MLA and MoE layers), what the layer under backward holds for a moment, the
embedding's, the head's and the loss's, and each end stage's total with its micro-batches in
flight (formulas/activations.py, formulas/moe.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import _ops
from ..formulas import activations as A
from ..formulas import comm as C
from ..formulas import moe as MO
from ..formulas import moe_memory as MM
from ..formulas import moe_mtp as MTP
from ..formulas import pipeline as PL
from ..formulas import quantization as Q
from ..formulas import recompute as RC
from ..formulas.choices import Recompute, RecomputeModule, Schedule
from ..frameworks.base import ActivationStyle, LossKind
from .numbers import Choices, may_be_nonzero, moe_picker, same


def saved_layer_bytes(x, c: Choices, k: SimpleNamespace, routed_ffn, recompute):
    """A dense layer's saved activations under `recompute`, as its framework's blocks save them."""
    s, b, h, t, cp = k.s, k.b, k.h, k.t, k.cp
    if c.framework.memory.activations is ActivationStyle.EAGER and recompute is not Recompute.FULL:
        # eager PyTorch blocks (torchtitan): SDPA sees K and V repeated to all a heads
        if recompute is Recompute.SELECTIVE:
            return A.torchtitan_sac_layer_activation_bytes(
                s, b, h, x.n_heads, x.n_kv_heads, x.head_dim, routed_ffn, t, cp,
                c.sequence_parallel, x.act_bytes)
        return A.eager_layer_activation_bytes(s, b, h, x.n_heads, x.n_heads, x.head_dim,
                                              routed_ffn, t, cp, c.sequence_parallel,
                                              x.act_bytes)
    return A.layer_activation_bytes(
        s, b, h, x.n_heads, x.n_kv_heads, x.head_dim, routed_ffn, x.n_mlp, x.dropout, t, cp,
        c.sequence_parallel, recompute, c.attention, x.act_bytes)


def moe_mla_layer_bytes(x, c: Choices, k: SimpleNamespace, routed_ffn, recompute):
    """moe: an MLA layer's own tensors and a MoE layer's dispatcher (the k − 1 extra token copies
    and the router's scores); 0 for a dense model. A torchtitan MLA + MoE block under selective
    recompute is its per-op policy's whole set instead (torchtitan_sac_block_bytes); an MLA
    layer without MoE there keeps Korthikanti's MLA set, a MoE layer without MLA its
    dispatcher's eager set beside the dense per-op set."""
    if not k.moe_model:
        return 0
    s, b, h, t, cp = k.s, k.b, k.h, k.t, k.cp
    eager = c.framework.memory.activations is ActivationStyle.EAGER
    # fit: a --recompute-modules list without core_attn leaves the attention core's scores
    # (flash: its log-sum-exp) saved, as recompute_levels keeps them for a dense layer
    core_kept = (recompute is Recompute.SELECTIVE and c.recompute_modules is not None
                 and RecomputeModule.CORE_ATTN not in c.recompute_modules)
    mla = MO.mla_layer_activation_bytes(
        s, b, h, x.n_heads, x.q_rank, x.kv_rank, x.head_dim, x.rope_dim, x.v_dim, routed_ffn,
        x.n_mlp, x.dropout, t, cp, c.sequence_parallel,
        Recompute.NONE if core_kept else recompute, c.attention, x.act_bytes)
    if recompute is Recompute.FULL:
        dispatch = 0
    elif eager:
        # torchtitan's eager MoE (formulas/moe_memory.py, exact against the CPU oracle): its
        # router, sort, gathered rows and fp32-scored combine; R = λ·T·k rows on the busiest rank
        dispatch = x.moe * MM.dispatch_saved_bytes(
            k.moe_tokens, k.lam * k.moe_tokens * x.top_k, h, x.router_experts, x.top_k, 1,
            x.act_bytes)
    else:
        dispatch = x.moe * MO.moe_dispatch_activation_bytes(
            s, b, h, x.router_experts, x.top_k, t, cp, c.sequence_parallel, k.lam,
            x.act_bytes)
    if eager and recompute is Recompute.SELECTIVE:
        # fit: torchtitan's DeepSeek-V3 block keeps far less than the Korthikanti MLA set
        mla = x.moe * torchtitan_sac_block_bytes(x, c, k) + (1 - x.moe) * mla
        return x.mla * mla + (1 - x.mla) * dispatch
    return x.mla * mla + dispatch


def torchtitan_sac_block_bytes(x, c: Choices, k: SimpleNamespace):
    """fit: a torchtitan MLA + MoE block (DeepSeek-V3) under its per-op selective AC, one set
    with the busiest rank's λ·T·k dispatched rows and its T·k combined rows where ep > 1: the
    whole block one op-SAC region (torchtitan >= v0.2.1,
    formulas.moe_memory.torchtitan_sac_mla_moe_block_bytes), or with `torchtitan_flex_ac` the
    older flex path (torchtitan_flex_sac_block_bytes)."""
    s, b, h, t, cp, sp = k.s, k.b, k.h, k.t, k.cp, c.sequence_parallel
    rows_out = (1 - _ops.le(x.ep, 1)) * k.moe_tokens * x.top_k
    if c.torchtitan_flex_ac:
        return MM.torchtitan_flex_sac_block_bytes(
            s / cp * b, k.lam * rows_out, rows_out, h, x.shared_ffn, x.n_shared, t, sp,
            x.act_bytes)
    return MM.torchtitan_sac_mla_moe_block_bytes(
        s / cp * b, k.lam * rows_out, rows_out, h, x.n_heads, x.q_rank, x.kv_rank,
        x.head_dim - x.rope_dim, x.rope_dim, x.v_dim, x.top_k, x.shared_ffn, x.n_shared, t,
        sp, x.act_bytes)


def recompute_levels(x, c: Choices, k: SimpleNamespace, ffn, saved) -> dict:
    """fit: one dense layer's saved bytes at each recompute level, as the plan's framework and
    recipe keep them: {Recompute: bytes}.

    none: the framework's set, plus the recipe's change where Transformer Engine saves linear
    inputs quantised (formulas.quantization.saved_linear_inputs_delta_bytes);  full: the
    layer's input;  selective: eager frameworks' per-op set, or for fused layers the none set
    less what each checkpointed module drops (formulas.recompute: core_attn by default, which
    is Korthikanti's selective; under a recipe it frees the 16-bit attention output too)."""
    s, b, h, t, cp, sp = k.s, k.b, k.h, k.t, k.cp, c.sequence_parallel
    conv = c.framework.memory
    fused = bool(conv.fp8_saves_linear_inputs) and may_be_nonzero(x.fp8)  # TE: kept quantised
    e = x.fp8 * x.e_saved + (1 - x.fp8) * x.act_bytes if fused else x.act_bytes
    delta = (x.fp8 * Q.saved_linear_inputs_delta_bytes(s, b, h, x.n_heads, x.head_dim, ffn, t, cp,
                                                       sp, e, x.act_bytes) if fused else 0)
    none = saved(Recompute.NONE) + delta
    # full: the layer's input, split over the tp ranks where the checkpoint is distributed
    # (formulas.recompute.checkpoint_input_bytes; sequence parallelism already splits it)
    full = saved(Recompute.FULL)
    if not sp and may_be_nonzero(x.distribute):
        full = full / (1 + x.distribute * (t - 1))
    levels = {Recompute.NONE: none, Recompute.FULL: full}
    if conv.activations is ActivationStyle.EAGER or (c.recompute_modules is None and not fused):
        levels[Recompute.SELECTIVE] = saved(Recompute.SELECTIVE) + delta
        return levels
    drop = 0
    for module in c.recompute_modules or (RecomputeModule.CORE_ATTN,):
        if module is RecomputeModule.CORE_ATTN:
            scores = A.score_activation_bytes(s / cp, b, x.n_heads, x.dropout, c.attention,
                                              x.act_bytes)
            out = x.fp8 * x.act_bytes * s / cp * b * x.n_heads * x.head_dim if fused else 0
            drop = drop + RC.core_attention_saving_bytes(scores, t, out)
        elif module is RecomputeModule.MLP:
            drop = drop + RC.mlp_saving_bytes(s, b, h, ffn, x.n_mlp, t, cp, sp, e, x.act_bytes)
    levels[Recompute.SELECTIVE] = none - drop
    return levels


def moe_module_drop(x, c: Choices, k: SimpleNamespace):
    """fit: what `layernorm`, `moe_act`, `mla_up_proj`, `shared_experts` and `moe` in
    --recompute-modules drop from a MoE/MLA layer (0 for a dense model: Transformer Engine fuses
    a dense layer's norms into its linears, and the others touch MLA or experts only).
    layernorm: the norms that are modules of their own, the pre-MLP norm of a MoE layer and an
    MLA layer's input norm (gpt_layer_specs.py @ d98e8a64dd), 16-bit outputs; moe_act: the
    routed experts' activation output, fc2's saved input (experts.py activation_recompute; under
    a recipe fc2 saves its original input, which the checkpoint discards:
    set_save_original_input); mla_up_proj: Q, K, V and the normed latents of an MLA layer;
    shared_experts: the shared experts' intermediates; moe: the whole MoE layer's set beside its
    input, which holds what moe_act and shared_experts would drop (counted once)."""
    modules = c.recompute_modules or ()
    if not k.moe_model or c.recompute is not Recompute.SELECTIVE:
        return 0
    s, b, h, t, cp, sp = k.s, k.b, k.h, k.t, k.cp, c.sequence_parallel
    fused = bool(c.framework.memory.fp8_saves_linear_inputs) and may_be_nonzero(x.fp8)
    e = x.fp8 * x.e_saved + (1 - x.fp8) * x.act_bytes if fused else x.act_bytes
    drop = 0
    if RecomputeModule.LAYERNORM in modules:
        drop = drop + RC.layernorm_saving_bytes(s, b, h, t, cp, sp, x.act_bytes, x.moe + x.mla)
    if RecomputeModule.MLA_UP_PROJ in modules:
        drop = drop + x.mla * RC.mla_up_proj_saving_bytes(
            s, b, x.n_heads, x.q_rank, x.kv_rank, x.head_dim, x.v_dim, t, cp, sp, x.act_bytes)
    shared_width = x.shared_ffn * x.n_shared
    if RecomputeModule.MOE in modules:
        dispatch = MO.moe_dispatch_activation_bytes(s, b, h, x.router_experts, x.top_k, t, cp,
                                                    sp, k.lam, x.act_bytes)
        return drop + x.moe * RC.moe_layer_saving_bytes(
            s, b, MO.routed_ffn_width(x.expert_ffn, x.top_k, x.shared_ffn, x.n_shared, k.lam),
            x.n_mlp, t, cp, dispatch, e, x.act_bytes)
    if RecomputeModule.MOE_ACT in modules:
        drop = drop + x.moe * RC.activation_fn_saving_bytes(
            s, b, MO.routed_ffn_width(x.expert_ffn, x.top_k, imbalance=k.lam), t, cp, e)
    if RecomputeModule.SHARED_EXPERTS in modules:
        drop = drop + x.moe * RC.shared_experts_saving_bytes(s, b, shared_width, x.n_mlp, t,
                                                             cp, e, x.act_bytes)
    return drop


def layer_activations(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """A layer's saved activations, and what its backward holds beside them for a moment."""
    s, b, h, t, cp = k.s, k.b, k.h, k.t, k.cp
    pick = moe_picker(x, k.moe_model)
    # a token's MLP activations are kept in each of the top-k experts it is routed to
    routed_ffn = x.ffn * x.top_k
    # moe: a MoE layer stores k routed expert widths (× the busiest rank's load) and the shared
    # experts'; an MLA layer its own tensors (formulas/moe.py); the dispatcher keeps the k − 1
    # extra token copies and the router's scores
    moe_width = MO.routed_ffn_width(x.expert_ffn, x.top_k, x.shared_ffn, x.n_shared, k.lam)
    routed_ffn = pick(lambda: _ops.select(x.moe, moe_width, x.ffn), routed_ffn)

    def saved(recompute):
        return saved_layer_bytes(x, c, k, routed_ffn, recompute)

    not_mla = 1 - x.mla if k.moe_model else 1  # moe: an MLA layer's activations replace these
    levels = recompute_levels(x, c, k, routed_ffn, saved)

    module_drop = moe_module_drop(x, c, k)  # fit: the MoE/MLA modules listed

    def layer_set(recompute):  # one layer's saved bytes at a level, MoE/MLA parts included
        drop = module_drop if recompute is Recompute.SELECTIVE else 0
        return (not_mla * levels[recompute]
                + moe_mla_layer_bytes(x, c, k, routed_ffn, recompute) - drop)

    # fit: partial recompute, r of the stage's layers recomputed fully and the rest keeping
    # everything; the stage holds layers × this mean layer (formulas.recompute)
    partial = c.recompute is Recompute.FULL and may_be_nonzero(x.recompute_layers)
    grouped = (c.recompute is Recompute.FULL and not partial
               and may_be_nonzero(getattr(x, "recompute_group", 1) - 1))
    recomputed = k.layers
    if partial:  # 0 (the default) is every layer of the stage
        recomputed = note("recomputed_layers", _ops.select(
            _ops.le(x.recompute_layers, 0), k.layers,
            _ops.minimum(x.recompute_layers, k.layers)))
        layer_act = note("layer_activation_bytes", RC.partial_saved_bytes(
            k.layers, recomputed, layer_set(Recompute.FULL), layer_set(Recompute.NONE))
            / k.layers)
    elif grouped:
        # fit: Megatron's uniform method, groups of g layers checkpointed as one unit: ⌈L/g⌉
        # inputs kept (formulas.recompute.grouped_saved_bytes; the last group may be shorter)
        # fit: Megatron groups each virtual chunk's layers apart, v·⌈(L/v)/g⌉ units
        # (formulas.recompute.grouped_checkpoints)
        g = x.recompute_group
        units = RC.grouped_checkpoints(k.layers, g, k.v)
        layer_act = note("layer_activation_bytes", RC.grouped_saved_bytes(
            units * g, g, layer_set(Recompute.FULL)) / k.layers)
    else:
        layer_act = note("layer_activation_bytes", layer_set(c.recompute))
    all_set = (layer_set(Recompute.NONE) if c.recompute is Recompute.NONE  # the whole set,
               else note("layer_all_bytes", layer_set(Recompute.NONE)))  # named where cut
    # the layer under backward recomputes what it did not save: under full recompute all of its
    # activations are alive for a moment (a whole group's under the uniform method: its g
    # layers rerun before their backward, formulas.recompute.grouped_working_bytes), under
    # selective the rest of them
    full_working = (RC.grouped_working_bytes(_ops.minimum(x.recompute_group, k.layers / k.v),
                                             all_set)
                    if grouped else
                    # fit: r < L recomputed layers rerun after the others freed theirs
                    RC.partial_working_bytes(k.layers, recomputed, all_set)
                    if partial else all_set)
    working_act = (full_working if c.recompute is Recompute.FULL else
                   all_set - layer_act  # selective: neither partial nor grouped
                   if c.recompute is Recompute.SELECTIVE else 0)
    # and its activation gradients: the residual stream's and the MLP intermediates'
    grad_act = note("backward_gradient_bytes", A.backward_gradient_bytes(
        s, b, h, routed_ffn, x.n_mlp, t, cp, x.act_bytes))
    # the loss's buffers and a layer's backward are not alive together, so a step's allocated
    # peak is the larger of the two phases (tests/oracle/test_step_peak.py), but the reserved
    # memory torchtitan measured for 70B at tp 8 is matched by their sum (−4.8 %), not by the
    # larger (−24.7 %), for a cause not established: plan3d counts both, erring toward "does not
    # fit" (formulas.activations.backward_phase_activation_bytes)
    # fit: the checkpoints a micro-batch of the stage keeps under full recompute (one per
    # recomputed layer, or per group) and one checkpoint's bytes as kept on the GPU
    checkpoints = (units if grouped else recomputed) if c.recompute is Recompute.FULL else 0
    return SimpleNamespace(routed_ffn=routed_ffn, layer_act=layer_act,
                           bwd_phase=working_act + grad_act, recomputed=recomputed,
                           rerun=recomputed / k.layers if partial else 1,
                           checkpoints=checkpoints, checkpoint_bytes=layer_set(Recompute.FULL))


def activations(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """Each end stage's activations: its layers' with the micro-batches in flight, the
    embedding's, the loss's where the stage holds it, a backward's, and MoE's dispatch buffers."""
    s, b, h, t, cp, p, m, v, layers = k.s, k.b, k.h, k.t, k.cp, k.p, k.m, k.v, k.layers
    lay = layer_activations(x, c, k, note)
    layer_act, bwd_phase = lay.layer_act, lay.bwd_phase
    # moe: Megatron's merged 1F1B (--moe-a2a-overlap but under DualPipeV) holds one layer more
    merged = (x.moe * x.a2a_overlap if k.moe_model and c.schedule is not Schedule.DUALPIPEV
              else 0)

    def in_flight(n):
        return PL.merged_in_flight(n, layers, m, merged)

    inflight_first = note("inflight_first",
                          in_flight(PL.in_flight_first_stage(p, m, v, c.schedule)))
    inflight_last = note("inflight_last", in_flight(PL.in_flight_last_stage(p, m, v, c.schedule)))
    embed_act = A.embedding_activation_bytes(s, b, h, x.dropout, t, cp, c.sequence_parallel)
    logits_act = note("logits_bytes", A.logits_activation_bytes(s, b, k.vocab_padded, t, cp))
    # the stage holding the loss: the final norm's and LM head's saved inputs, and the loss at
    # its peak (the framework's cross entropy: vocab-parallel on 16-bit logits, or fp32 upcast)
    conv = c.framework.memory
    head_act = (A.eager_head_activation_bytes if conv.activations is ActivationStyle.EAGER
                else A.fused_head_activation_bytes)(s, b, h, t, cp, c.sequence_parallel,
                                                    x.act_bytes)
    # fit: torchtitan's compiled loss keeps the 16-bit logits and makes their 16-bit gradient
    if conv.loss is LossKind.FP32_UPCAST and c.compile_loss:
        loss_peak = A.compiled_loss_peak_bytes(s, b, k.vocab_padded, t, cp, x.act_bytes)
    elif conv.loss is LossKind.FP32_UPCAST:
        loss_peak = A.torchtitan_loss_peak_bytes(s, b, k.vocab_padded, t, cp)
    else:
        loss_peak = A.vocab_parallel_loss_peak_bytes(s, b, k.vocab_padded, t, cp, x.act_bytes)
    loss_act = note("loss_bytes", head_act + loss_peak)
    act_first = (inflight_first * (layers * layer_act + embed_act) + k.both_ends * loss_act
                 + bwd_phase)
    act_last = inflight_last * layers * layer_act + loss_act + bwd_phase
    # moe: the dispatcher's send and receive buffers of the all-to-all in flight,
    # 2·T·k·load·h·act with T = b·s/(c·t) tokens per GPU (0 for a dense model)
    moe_tokens = k.moe_tokens
    if k.moe_model:
        # moe: the multi-token-prediction modules' layers, inputs and losses (moe_mtp.py)
        act_last = act_last + note("mtp_bytes", MTP.mtp_activation_bytes(
            k.mtp_depth, inflight_last, s, b, h, cp, t if c.sequence_parallel else 1, loss_act,
            x.act_bytes))
        dispatch_buffers = note("moe_dispatch_buffer_bytes", x.moe * 2 * moe_tokens
                                * x.top_k * k.lam * h * x.act_bytes)
        act_first = act_first + dispatch_buffers
        act_last = act_last + dispatch_buffers
    # moe: each middle rank that may hold the most (parameters.split_moe_layers): its layers'
    # activations with its own micro-batches in flight, a backward's, the dispatch buffers; no
    # embedding and no loss
    middle = []
    for r in k.middle:
        inflight = in_flight(PL.in_flight_on_rank(r.rank, p, m, v, c.schedule))
        middle.append(SimpleNamespace(**vars(r), inflight=inflight,
                                      act=inflight * layers * layer_act + bwd_phase
                                      + dispatch_buffers))
    return SimpleNamespace(middle=tuple(middle), routed_ffn=lay.routed_ffn, layer_act=layer_act,
                           rerun=lay.rerun,
                           checkpoints=lay.checkpoints, checkpoint_bytes=lay.checkpoint_bytes,
                           inflight_first=inflight_first, inflight_last=inflight_last,
                           logits_act=logits_act, act_first=act_first, act_last=act_last,
                           moe_tokens=moe_tokens)


def checkpoint_gather_mb_s(x, c: Choices, k: SimpleNamespace, note=same):
    """fit: the all-gathers that rebuild each distributed checkpoint before its rerun (Megatron
    --distribute-saved-activations, DeepSpeed partition_activations), per micro-batch on the
    stage: checkpoints × a ring all-gather of the layer input over the tp group, at TP's link
    and share (formulas.recompute.checkpoint_gather_volume_bytes); 0 without them."""
    if c.recompute is not Recompute.FULL or c.sequence_parallel or not may_be_nonzero(
            x.distribute):
        return 0
    g = k.links.tp
    one = C.ring_time_s(RC.checkpoint_gather_volume_bytes(k.s, k.b, k.h, k.t, k.cp, x.act_bytes),
                        g.bw * k.tp_share, k.t, g.k, 1, x.fast_lat, x.net_lat)
    return note("checkpoint_gather_microbatch_s", x.distribute * k.checkpoints * one)
