"""Recompute between "none" and "full": some layers, some modules, the checkpoint spread out.

Frameworks offer finer levels than Korthikanti et al. (2022)'s three:

- **Partial, by layers** — Megatron-Core `--recompute-granularity full --recompute-method block
  --recompute-num-layers N`: the first N layers of each pipeline stage (each virtual chunk) keep
  only their input and rerun their forward; the other layers keep everything
  (transformer_block.py `_checkpointed_forward`, block branch, @ d98e8a6). torchtitan's per-layer
  selective AC (`--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option
  N`) wraps every N-th block in a full checkpoint, ⌊L/N⌋ of the stage's L
  (torchtitan/distributed/activation_checkpoint.py @ 1f029641b, `_apply_layer_sac`: a layer counter
  `% ac_freq == 0`; the per-layer option was removed at 114151ad4, which keeps per-op only).
  Both are `partial_saved_bytes` with r recomputed layers.
- **Grouped** — Megatron `--recompute-method uniform --recompute-num-layers N` and
  Megatron-DeepSpeed's `--checkpoint-num-layers N` (DeepSpeed's own `number_checkpoints` only
  sizes the contiguous buffers of `contiguous_memory_optimization`: deepspeed
  runtime/activation_checkpointing/checkpointing.py): the stage's layers in groups of g = N are
  checkpointed as one
  unit, which keeps the group's input only (L/g inputs per micro-batch), and in the backward one
  whole group is rerun at once, so g layers' full sets are alive (`grouped_saved_bytes`,
  `grouped_working_bytes`).
- **Per module** — Megatron `--recompute-granularity selective --recompute-modules ...`
  (transformer_config.py l.560-590 @ d98e8a6): each module listed drops what it saved
  (the *_saving_bytes functions below: core_attn, mlp, layernorm, moe_act, mla_up_proj,
  shared_experts, moe), and its forward is rerun in the backward.
- **Where the checkpoint lives** — Megatron `--distribute-saved-activations` (only without
  sequence parallelism, transformer_config.py l.1934) and DeepSpeed `partition_activations` split
  the checkpointed input over the t tensor-parallel ranks; DeepSpeed `cpu_checkpointing` moves it
  to host memory (`checkpoint_input_bytes`).

A layer's saved set, in Korthikanti's terms for a fused (Transformer Engine) Megatron-Core layer,
per micro-batch before the tp/sp division, with act = 2 bytes: the two norms' inputs 2·act·sbh,
the QKV and fc1 inputs (the norms' outputs) 2·act·sbh, Q/K/V and the projection input
act·sb·d_h(2a + 2k), the activation function's input act·sb·(n_mlp − 1)·f, fc2's input act·sbf,
dropout masks, and the attention core (scores or the flash log-sum-exp) — see
formulas.activations.  The module savings below are the parts of that set a module's checkpoint
drops.
"""

from __future__ import annotations

from . import _ops


def partial_saved_bytes(n_layers, n_recomputed, input_bytes, kept_bytes):
    """Activation bytes a stage keeps per micro-batch when r of its L layers are fully recomputed
    and the rest keep their set (Megatron block method, torchtitan every-N-th-layer):

        r·input + (L − r)·kept

    r = 0 is no recompute (L·kept), r = L full recompute (L·input).  Llama 2 7B-like layer at
    s = 4096, b = 1, t = 1 (input 2sbh = 32 MiB, kept ≈ 34sbh = 544 MiB), L = 8, r = 2:
    2·32 + 6·544 = 3328 MiB."""
    return n_recomputed * input_bytes + (n_layers - n_recomputed) * kept_bytes


def grouped_saved_bytes(n_layers, group_layers, input_bytes):
    """A stage of L layers checkpointed in groups of g (Megatron uniform method, Megatron-DeepSpeed
    --checkpoint-num-layers g): one input per group, (L/g)·input.  g = 1 is full recompute."""
    return n_layers / group_layers * input_bytes


def grouped_working_bytes(group_layers, full_layer_bytes):
    """What the rerun of one group holds at its backward: g layers' full saved sets, g·full
    (Megatron `_checkpointed_forward` uniform branch: one `checkpoint` call per chunk of g layers;
    the chunk's forward reruns whole before its backward starts)."""
    return group_layers * full_layer_bytes


def partial_working_bytes(n_layers, n_recomputed, full_layer_bytes):
    """What the stage holds beside its saved sets while a recomputed layer reruns (block method,
    r of L layers): full·max(0, 1 − (L − r)), that is one layer's full set under full recompute
    (r = L) and nothing for r < L. The recomputed layers are the stage's first r (Megatron's
    block branch), whose backward runs last: by the rerun of layer r − 1 the L − r layers after
    it have run their backward and freed their sets (≥ one full set), so the peak is at the
    start of the backward, with every set still held (measured by tests/oracle/
    test_recompute_levels.py test_rerun_peaks: peaks of block r = 2 of 4 and uniform g = 2
    equal to the byte)."""
    return full_layer_bytes * _ops.maximum(0, 1 - (n_layers - n_recomputed))


def recompute_layer_fraction(n_layers, n_recomputed):
    """The share of the stage's layers whose forward reruns in the backward, r/L (grouped
    recompute reruns every layer: r = L)."""
    return n_recomputed / n_layers


def checkpoint_input_bytes(seq_len, mbs, hidden, tp, cp, sequence_parallel: bool, distributed,
                           on_host, act_bytes=2):
    """A checkpointed layer's (or group's) input as kept on the GPU:

        act·sbh / t_sp / t^(distributed·(1 − sp)) · (1 − on_host)

    where t_sp = t under sequence parallelism (the input is already split); `distributed`
    (Megatron --distribute-saved-activations, DeepSpeed partition_activations) splits it t ways
    otherwise; `on_host` (DeepSpeed cpu_checkpointing) moves it to host memory.  s over c.
    Llama 70B, s = 4096, b = 1, t = 8 without SP: 2·4096·8192 = 64 MiB, distributed 8 MiB."""
    sp = tp if sequence_parallel else 1
    spread = 1 if sequence_parallel else 1 + distributed * (tp - 1)  # distributed: 0 or 1
    return act_bytes * seq_len / cp * mbs * hidden / sp / spread * (1 - on_host)


def core_attention_saving_bytes(score_bytes, tp, output_bytes=0):
    """`core_attn`: the attention core's own saved tensors, dropped and recomputed
    (Korthikanti's selective recompute): (scores + out)/t, with score_bytes from
    formulas.activations.score_activation_bytes (5as²b classic, 4asb fused flash).

    out: the core's 16-bit output, act·sb·a·d_h.  Without a low-precision recipe the projection
    saves that same tensor as its input, so checkpointing the core frees nothing of it (pass 0);
    under a recipe the projection keeps its own quantised copy and only the kernel kept the
    16-bit output, which the checkpoint then frees (measured by
    tests/oracle/test_recompute_levels.py)."""
    return (score_bytes + output_bytes) / tp


def mlp_saving_bytes(seq_len, mbs, hidden, ffn, n_mlp, tp, cp, sequence_parallel: bool,
                     input_bytes, act_bytes=2):
    """`mlp`: checkpointing the dense MLP (with Transformer Engine the pre-MLP norm is fused into
    fc1, so the checkpoint's input is the norm's input, which the layer keeps anyway) drops fc1's
    input, the activation function's input and fc2's input:

        sb·(input·h/t_sp + act·(n_mlp − 1)·f/t + input·f/t)

    with `input` the bytes of a saved linear input (act, or the fp8 recipe's
    saved_input_bytes_per_element).  GPT (f = 4h, n_mlp = 2, act = input = 2, t = 1):
    2sbh + 8sbh + 8sbh = 18sbh of Korthikanti's 19sbh MLP (the dropout mask stays)."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    return s * mbs * (input_bytes * hidden / sp + (act_bytes * (n_mlp - 1) + input_bytes) * ffn / tp)


def layernorm_saving_bytes(seq_len, mbs, hidden, tp, cp, sequence_parallel: bool, input_bytes,
                           n_norms=2):
    """`layernorm`: the outputs of the layer's separate norm modules (the QKV and fc1 inputs)
    are discarded after use and recomputed from the norms' inputs (output-discarding
    checkpoint, `CheckpointWithoutOutput`): n·input·sbh/t_sp.  Megatron-Core recomputes only a
    norm that is a module of its own (transformer_layer.py l.475-530 @ d98e8a64dd: not an
    IdentityOp); Transformer Engine's layer spec fuses both norms of a dense layer into the
    following linear (gpt_layer_specs.py), so there n = 0, and a MoE layer keeps its pre-MLP
    norm apart, n = 1."""
    sp = tp if sequence_parallel else 1
    return n_norms * input_bytes * seq_len / cp * mbs * hidden / sp


def layernorm_rerun_bytes(seq_len, mbs, hidden, tp, cp, sequence_parallel: bool, n_norms=1,
                          act_bytes=2):
    """HBM traffic of rerunning n norms in the backward: each reads its input and writes its
    output, 2·n·act·sbh/t_sp (memory-bound: formulas.timing.memory_bound_time_s)."""
    sp = tp if sequence_parallel else 1
    return 2 * n_norms * act_bytes * seq_len / cp * mbs * hidden / sp


def activation_fn_rerun_bytes(seq_len, mbs, width, n_mlp, tp, cp, act_bytes=2):
    """HBM traffic of rerunning the (gated) activation function in the backward: it reads the
    n_mlp − 1 fc1 outputs of `width` and writes one, n_mlp·act·sb·width/t."""
    return n_mlp * act_bytes * seq_len / cp * mbs * width / tp


def activation_fn_saving_bytes(seq_len, mbs, width, tp, cp, input_bytes):
    """`moe_act` (and an activation-only recompute): the activation function's output, fc2's
    input, is discarded and recomputed from the kept fc1 output: input·sb·width/t, with width the
    f (or for routed experts k·f_e, times the load factor) the layer's fc2 reads."""
    return input_bytes * seq_len / cp * mbs * width / tp


def mla_up_proj_saving_bytes(seq_len, mbs, n_heads, q_lora_rank, kv_lora_rank, qk_head_dim,
                             v_head_dim, tp, cp, sequence_parallel: bool, act_bytes=2):
    """`mla_up_proj`: MLA's up-projections and RoPE run in an output-discarding checkpoint
    (`CheckpointWithoutOutput`) from the pre-norm latents c_Q, [c_KV; k_R], which it keeps (the
    up-projections' fused norms kept them anyway, and k_R shares c_KV's storage); once the
    attention core has saved Q, K and V their storage is freed and refilled before its backward.
    Dropped: the normed latents the up-projections saved as their inputs (r_q + r_kv, on the
    sequence shard) and the core's Q, K (a·d_qk each) and V (a·d_v), split over t:

        act·sb·((r_q + r_kv)/t_sp + a·(2·d_qk + d_v)/t),   over c

    (r_q = 0 without query compression: the query projection then reads the input norm's
    output, which the down-projection keeps.)  The attention output, the output projection's
    input, stays.  Source: Megatron-LM multi_latent_attention.py `qkv_up_proj_and_rope_apply`
    under `self.recompute_up_proj`, `discard_output_and_register_recompute(core_attn_out)`;
    gpt_layer_specs.py (qk_layernorm: TELayerNormColumnParallelLinear up-projections, q/kv_
    layernorm IdentityOp) @ d98e8a64dd.  DeepSeek-V3 (a = 128, r_q = 1536, r_kv = 512,
    d_qk = 192, d_v = 128) at s = 4096, b = 1, t = c = 1: 2·4096·(2048 + 128·512) = 528 MiB."""
    s = seq_len / cp
    sp = tp if sequence_parallel else 1
    return act_bytes * s * mbs * ((q_lora_rank + kv_lora_rank) / sp
                                  + n_heads * (2 * qk_head_dim + v_head_dim) / tp)


def mla_up_proj_weights(hidden, n_heads, q_lora_rank, kv_lora_rank, qk_head_dim, v_head_dim,
                        qk_rope_head_dim):
    """The matmul weights `mla_up_proj` reruns per token (∝ its GEMM FLOPs): the query up- (or,
    without compression, r_q = 0, the query) projection and the key/value up-projection,

        q_in·a·d_qk + r_kv·a·(d_qk − d_r + d_v),   q_in = r_q or h

    the norms and RoPE being memory-bound beside them.  DeepSeek-V3: 1536·128·192 +
    512·128·256 = 37,748,736 + 16,777,216 = 54,525,952 (of its 187,105,280 MLA weights)."""
    q_in = q_lora_rank + _ops.le(q_lora_rank, 0) * hidden
    return (q_in * n_heads * qk_head_dim
            + kv_lora_rank * n_heads * (qk_head_dim - qk_rope_head_dim + v_head_dim))


def shared_experts_saving_bytes(seq_len, mbs, width, n_mlp, tp, cp, input_bytes, act_bytes=2):
    """`shared_experts`: the shared experts (n_s·f_s = width) run in a plain checkpoint from the
    MoE layer's input, which the router and the dispatched copies keep anyway; dropped are their
    activation function's input and fc2's input:

        sb·width·(act·(n_mlp − 1) + input)/t,   over c

    Source: Megatron-LM moe/moe_layer.py `shared_experts_compute` (`tensor_parallel.checkpoint`,
    `te_checkpoint` under a recipe) @ d98e8a64dd.  DeepSeek-V3 (one shared expert of 2048,
    SwiGLU) at s = 4096, b = 1, t = 1, 16-bit: 4096·2048·(2·2 + 2) = 48 MiB."""
    return seq_len / cp * mbs * width * (act_bytes * (n_mlp - 1) + input_bytes) / tp


def moe_layer_saving_bytes(seq_len, mbs, width, n_mlp, tp, cp, dispatch_bytes, input_bytes,
                           act_bytes=2):
    """`moe`: the whole MoE layer (router, dispatch, routed and shared experts, combine) runs in
    a plain checkpoint that keeps only its input, the pre-MLP norm's output; dropped are the
    experts' activation inputs and fc2 inputs over the layer's stored width (λ·k·f_e + n_s·f_s)
    and what the dispatcher keeps (the extra token copies and the router's scores,
    formulas.moe.moe_dispatch_activation_bytes):

        sb·width·(act·(n_mlp − 1) + input)/t + dispatch,   over c

    Its backward reruns the layer's forward, the token exchange included.  Source: Megatron-LM
    moe/moe_layer.py `forward` (`custom_forward` under `moe_layer_recompute`) @ d98e8a64dd."""
    return (shared_experts_saving_bytes(seq_len, mbs, width, n_mlp, tp, cp, input_bytes,
                                        act_bytes) + dispatch_bytes)


def fewest_layers_to_recompute(n_layers, full_bytes, capacity_bytes, per_layer_gain_bytes):
    """The fewest of a stage's L layers to recompute fully (block method) for the GPU to fit,
    given the plan's total with all L recomputed (full_bytes) and what each layer *not*
    recomputed adds (per_layer_gain_bytes = in-flight micro-batches × (kept − input)):

        r = clamp(⌈L − (C − M_full)/g⌉, 1, L)

    Memory with r layers recomputed is at most M_full + (L − r)·g for r ≥ 1 (it is less by one
    layer's full set for r < L, when no rerun is alive at the peak: partial_working_bytes), so
    r keeps it within C; it may be one more than the least that would (the search recosts it).
    A plan that does not fit even with all L recomputed gets L (and still does not fit).
    Example: L = 20, M_full = 60 GiB, C = 80 GiB, g = 3 GiB: ⌈20 − 20/3⌉ = ⌈13.33⌉ = 14."""
    r = _ops.ceil(n_layers - (capacity_bytes - full_bytes) / per_layer_gain_bytes)
    return _ops.minimum(_ops.maximum(r, 1), n_layers)


def grouped_checkpoints(n_layers, group_layers, chunks=1):
    """How many units a stage of L layers in v virtual chunks is checkpointed in, groups of g
    (Megatron's uniform method): v·⌈(L/v)/g⌉. Megatron-Core groups each TransformerBlock's own
    layers (megatron/core/recompute.py `checkpointed_forward` @ d98e8a64dd: `while layer_idx <
    self.num_layers_per_pipeline_rank`, with len(self.layers) of the block), and under
    interleaving each virtual chunk is a block of its own, so the last group of every chunk may be
    short. L = 8, v = 2, g = 3: 2·⌈4/3⌉ = 4 units (v = 1: ⌈8/3⌉ = 3)."""
    return chunks * _ops.ceil(n_layers / chunks / group_layers)


def checkpoint_gather_volume_bytes(seq_len, mbs, hidden, tp, cp, act_bytes=2):
    """What one rank receives to rebuild a checkpoint split over the t tensor-parallel ranks
    before its rerun: an all-gather of the act·sbh input, (t − 1)/t · act·sbh/c bytes per
    checkpoint per micro-batch. Megatron `--distribute-saved-activations` (tensor_parallel/
    random.py CheckpointFunction.backward, gather_split_1d_tensor @ d98e8a64dd) and DeepSpeed
    `partition_activations` (runtime/activation_checkpointing/checkpointing.py
    gather_partitioned_activations @ edaa722) both gather on the compute stream before the rerun,
    so the gather is on the critical path. Llama 70B, s = 4096, b = 1, t = 8, c = 1: 7/8 · 64 MiB
    = 56 MiB."""
    return (tp - 1) / tp * act_bytes * seq_len / cp * mbs * hidden


CPU_CHECKPOINT_RESIDENT_INPUTS = 2
"""Checkpoint inputs DeepSpeed's asynchronous `cpu_checkpointing` keeps on the GPU beside what it
offloads (runtime/activation_checkpointing/offload_activations.py @ edaa722,
`_ActivationOffloadEngine` built by checkpointing.py `_get_cpu_offload_engine` with
keep_last_count = 1): the newest input is not offloaded (`_keep_last`), and the one before it
stays referenced in the forward stash until the next offload reaps it (`_reap_forward_stash`
drops ids ≤ newest − max_fwd_stash_count = newest − 2 before adding the one it starts): 1 + 1.
With partition_activations the engine is not used (blocking copies), and none stays."""


def cpu_checkpoint_resident_bytes(input_bytes, partitioned):
    """DeepSpeed `cpu_checkpointing`: the checkpoint inputs still on the GPU, 2·input without
    partition_activations (CPU_CHECKPOINT_RESIDENT_INPUTS), 0 with it (partitioned: 0 or 1)."""
    return CPU_CHECKPOINT_RESIDENT_INPUTS * input_bytes * (1 - partitioned)


def cpu_checkpoint_exposed_s(copy_s, forward_s, blocking):
    """DeepSpeed `cpu_checkpointing`: the host copies of a stage's checkpoint inputs per
    micro-batch, each way copy_s, against its forward forward_s.

    Without partition_activations (blocking = 0) the copies out run on a side stream under the
    forward (offload_activations.py `_start_offload`: `s1.wait_stream(compute)`, non_blocking),
    but each input comes back only when its backward asks for it (`_restore_tensor`: the compute
    stream waits on the copy's event; nothing is prefetched): max(0, T_copy − T_fwd) + T_copy.
    With partition_activations (blocking = 1) both copies are synchronous (checkpointing.py
    `partition.cpu()` in the forward, `saved_data.to(device)` in the backward): 2·T_copy.
    The last two inputs of the step, kept on the GPU, are not discounted (≤ 2 of L·m copies)."""
    return (blocking * 2 * copy_s
            + (1 - blocking) * (_ops.maximum(0, copy_s - forward_s) + copy_s))


def contiguous_checkpoint_extra_bytes(number_checkpoints, stage_checkpoints, checkpoint_bytes):
    """DeepSpeed `contiguous_memory_optimization`: the first checkpoint after a backward allocates
    `number_checkpoints` buffers of each partitioned input at once and fills them in order
    (checkpointing.py `partition_activations`: `new_empty` × num_layers when the list is empty; the
    backward empties the list, so the unused buffers are freed only then): N − n more
    checkpoints than the n a micro-batch of the stage uses are alive at the peak.
    Megatron-DeepSpeed passes num_checkpoints = --num-layers (N = L); a stage of L/p layers holds
    (L − L/p)·checkpoint more. N below the checkpoints of the micro-batches in flight fails
    (list index out of range), which plan3d refuses before it costs."""
    return (number_checkpoints - stage_checkpoints) * checkpoint_bytes


# ---------------------------------------------------------------------------------------------
# torchtitan's per-op selective AC: which matmuls the backward runs again


def op_sac_recomputed_weights(counted_weights, forced_weights=0, grouped_weights=0):
    """Matmul weights (per token, so ∝ FLOPs) one block reruns in its backward under torchtitan's
    per-op selective AC (`--activation_checkpoint.mode selective --activation_checkpoint.
    selective_ac_option op`), from the block's `aten.mm` calls in the order its forward makes
    them, W₁, W₂, …, Wₙ:

        W_rec = Σ_{i even} W_i + W_forced + W_grouped

    The policy saves the output of every op in its save list (mm, SDPA/flex attention,
    all_to_all_single, reduce_scatter, max) "except every second mm", counted per checkpointed
    region from 1, and recomputes every other op; mms whose weight shape is in
    `per_op_sac_force_recompute_mm_shapes_by_fqns` (default ["moe.router.gate"]) are recomputed
    and not counted (`forced`); `torch._grouped_mm`, the routed experts' GEMMs, is not in the
    list and is always recomputed (`grouped`: k experts' weights per token).
    Source: torchtitan torchtitan/distributed/activation_checkpoint.py `_apply_op_sac` @ 99fee810b
    (l.97-117; the same rule at v0.2.2, and SelectiveAC at b5bcd76), its save list
    models/deepseek_v3/infra/parallelize.py `_op_sac_save_list` @ 99fee810b and v0.2.2 (the llama3
    list likewise, without all_to_all), job_config.py `per_op_sac_force_recompute_mm_shapes_by_
    fqns` @ 99fee810b and v0.2.2. A Llama block calls wq, wk, wv, wo, w1, w3, w2 and reruns wk,
    wo, w3 (the complement of what formulas.activations.torchtitan_sac_layer_activation_bytes
    keeps); DeepSeek-V3 16B's MoE block (MLA without q compression) wq, wkv_a, wkv_b, wo, w1, w3,
    w2 of the shared experts, gate forced: reruns wkv_a, wo, w3, the gate and the experts."""
    even = sum(w for i, w in enumerate(counted_weights) if i % 2 == 1)
    return even + forced_weights + grouped_weights


def op_sac_regions(mla, flex_ac):
    """How torchtitan wraps a block for per-op selective AC, as (attention in full AC, 0/1):
    before v0.2.1 a model with flex attention and not compiled (its DeepSeek-V3 flavours) had its
    `attention` module in full AC — every attention weight and the attention product rerun —
    and its `moe` / `feed_forward` in op SAC, counted from that module's first mm; other
    models, and every model from v0.2.1 (0.2.2 `_apply_op_sac`, 0.3.0 `SelectiveAC`, whose save
    list holds the compiled flex region, `inductor_compiled_code`), the whole block in op SAC
    (the attention product saved). Source: torchtitan activation_checkpoint.py
    `_apply_op_sac_to_transformer_block_with_flex` @ 99fee810b and 176498cd4 (the published
    rows' commits; removed at 575674a, v0.2.1). mla: 0/1, the model's MLA (flex-attention)
    flag; flex_ac: 0/1, PlanConfig.torchtitan_flex_ac (the pre-v0.2.1 code).

        r_att = [MLA]·[flex_ac]"""
    return mla * flex_ac


def op_sac_rerun_s(matmul_s, recomputed_share, forward_other_s, attention_s=0,
                   attention_rerun=0):
    """One layer's forward work rerun in its backward under torchtitan's per-op selective AC
    (op_sac_recomputed_weights): ρ of its matmul time, ρ = W_rec / W_active the recomputed
    share of the layer's matmul weights (FLOPs), and every op the policy does not save — the
    norms, activations, rotary, the router's and the token permutation's kernels, their
    launches —; the attention product only where the attention runs in full AC
    (attention_rerun, op_sac_regions), SDPA and flex attention being saved otherwise:

        T_rec = ρ·T_mm + T_other + r_att·T_att

    `forward_other_s` is the forward less its matmuls and attention. torchtitan sets
    `early_stop` False (job_config.py @ 99fee810b), so the region's whole forward reruns."""
    return recomputed_share * matmul_s + forward_other_s + attention_rerun * attention_s
