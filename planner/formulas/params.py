"""Parameter counts from a transformer's shape.

Notation (Narayanan et al. 2021; Korthikanti et al. 2022): h hidden size, a attention heads,
k key/value heads (GQA; k = a is multi-head attention), d_h head dimension (h/a unless the model
says otherwise), f feed-forward size, n_mlp the MLP's weight matrices (2 for GELU, 3 for SwiGLU),
V vocabulary, s sequence length, L layers, E experts.

Sharding by tensor parallelism (Shoeybi et al. 2019, Megatron-LM): Q/K/V and the first MLP matrices
are column-parallel (weights and biases split over t), the attention output and the last MLP
matrix are row-parallel (weights split, their biases replicated), norms are replicated.
"""

from __future__ import annotations

from . import _ops


def attention_weight_params(hidden, n_heads, n_kv_heads, head_dim):
    """Q and O are h × a·d_h; K and V are h × k·d_h:  h·d_h·(2a + 2k).

    With k = a and d_h = h/a this is the classic 4h² (Narayanan 2021 eq. 2's 4h² term)."""
    return hidden * head_dim * (2 * n_heads + 2 * n_kv_heads)


def mlp_weight_params(hidden, ffn, n_mlp_matrices, n_experts=1):
    """n_mlp · h · f per expert: 2hf for GELU (8h² at f = 4h), 3hf for SwiGLU."""
    return n_experts * n_mlp_matrices * hidden * ffn


def router_params(hidden, n_experts):
    """The MoE router h × E (zero for a dense model, E = 1 counts nothing: E·h·[E > 1] is
    applied by the caller through n_router_experts)."""
    return hidden * n_experts


def column_bias_params(hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices, bias, n_experts=1):
    """Biases of the column-parallel linears (split by t): QKV d_h·(a + 2k) and the MLP's first
    matrices (n_mlp − 1)·f per expert. `bias` is 1 for GPT-style models, 0 for Llama-style."""
    return bias * (head_dim * (n_heads + 2 * n_kv_heads) + n_experts * (n_mlp_matrices - 1) * ffn)


def row_bias_params(hidden, bias, n_experts=1):
    """Biases of the row-parallel linears (replicated over t): attention output h, MLP output h."""
    return bias * (hidden + n_experts * hidden)


def norm_params(hidden, norm_width):
    """Two norms per layer; `norm_width` = 2 for LayerNorm (γ, β), 1 for RMSNorm (γ)."""
    return 2 * norm_width * hidden


def layer_sharded_params(hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices, bias,
                         n_experts=1, n_router_experts=0):
    """Per-layer parameters that tensor parallelism splits t ways (the router is replicated in
    Megatron-Core, but it is E·h, negligible; it is counted here with the sharded weights only to
    keep one sum)."""
    return (attention_weight_params(hidden, n_heads, n_kv_heads, head_dim)
            + mlp_weight_params(hidden, ffn, n_mlp_matrices, n_experts)
            + column_bias_params(hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices, bias,
                                 n_experts)
            + router_params(hidden, n_router_experts))


def layer_replicated_params(hidden, bias, norm_width, n_experts=1):
    """Per-layer parameters every tensor-parallel rank holds whole: norms and row-parallel biases."""
    return norm_params(hidden, norm_width) + row_bias_params(hidden, bias, n_experts)


def layer_params(hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices, bias, norm_width,
                 n_experts=1, n_router_experts=0):
    """All parameters of one transformer layer. GPT (a = k, d_h = h/a, f = 4h, GELU, biases,
    LayerNorm): 12h² + 13h, Narayanan 2021 eq. 2."""
    return (layer_sharded_params(hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices, bias,
                                 n_experts, n_router_experts)
            + layer_replicated_params(hidden, bias, norm_width, n_experts))


def embedding_params(vocab, hidden):
    """Token embedding V × h (the LM head has the same shape)."""
    return vocab * hidden


def position_embedding_params(max_positions, hidden, learned_positions):
    """Learned absolute positions s × h (GPT); 0 for rotary embeddings (Llama)."""
    return learned_positions * max_positions * hidden


def model_params(n_layers, hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices, bias,
                 norm_width, vocab, max_positions, learned_positions, tied_embeddings,
                 n_experts=1, n_router_experts=0):
    """Ψ = L·(layer) + V·h·(2 − tied) + positions + final norm.

    GPT-3 175B (L=96, h=12288, V=51,200, s=2048): 12Lh²(1 + 13/12h + (V+s)/12Lh) + 2h ≈ 174.6·10⁹,
    Narayanan 2021 eq. 2 (which leaves out the final norm's 2h)."""
    return (n_layers * layer_params(hidden, n_heads, n_kv_heads, head_dim, ffn, n_mlp_matrices,
                                    bias, norm_width, n_experts, n_router_experts)
            + (2 - tied_embeddings) * embedding_params(vocab, hidden)
            + position_embedding_params(max_positions, hidden, learned_positions)
            + norm_width * hidden)


def padded_vocab(vocab, tp, multiple=128):
    """Megatron pads V up to a multiple of 128·t so each rank's slice is GEMM-friendly:
    V_pad = ⌈V / (128·t)⌉ · 128·t  (megatron/training/tokenizer `_vocab_size_with_padding`)."""
    return _ops.ceil(vocab / (multiple * tp)) * multiple * tp


def layers_per_stage(n_layers, pp, vpp=1):
    """Layers on the most loaded pipeline stage: v·⌈L/(p·v)⌉, = L/p when p·v divides L.
    When it does not, stages are uneven (Megatron's --decoder-first/last-pipeline-num-layers) and
    the planner sizes memory and time for the fullest stage."""
    return _ops.ceil(n_layers / (pp * vpp)) * vpp


def layers_per_gpu(n_layers, pp):
    """Layers on the fullest GPU when the framework places layers freely over its chunks
    (Megatron's --pipeline-model-parallel-layout, chunk k on rank k mod p): ⌈L/p⌉, however many
    chunks v each GPU runs."""
    return _ops.ceil(n_layers / pp)


def layer_params_per_gpu(stage_layers, tp, layer_sharded, layer_replicated):
    """Parameters of a stage's L_s layers on one GPU, what a middle pipeline stage holds (no
    embedding, head or final norm): L_s·(sharded/t + replicated)."""
    return stage_layers * (layer_sharded / tp + layer_replicated)


def stage_params_per_gpu(stage_layers, tp, layer_sharded, layer_replicated, vocab_padded, hidden,
                         position_params, norm_width, tied_embeddings, first_stage, single_stage):
    """Parameters held by one GPU of the first (first_stage = 1) or last (0) pipeline stage.

    L_s·(sharded/t + replicated)  — the stage's L_s layers (L/p when even)
    + first stage: V_pad·h/t embedding + positions (replicated over t)
    + last stage: V_pad·h/t LM head (also when tied and p > 1: Megatron keeps a copy of the
      embedding on the last stage to compute the head, and all-reduces its gradient), final norm.
    With p = 1 (single_stage = 1) one GPU holds both ends, and a tied head adds nothing.
    """
    layers = layer_params_per_gpu(stage_layers, tp, layer_sharded, layer_replicated)
    embedding = vocab_padded * hidden / tp
    first = embedding + position_params
    head_copies = _ops.select(single_stage, 1 - tied_embeddings, 1)
    last = head_copies * embedding + norm_width * hidden
    ends = _ops.select(single_stage, first + last, _ops.select(first_stage, first, last))
    return layers + ends


# ---------------------------------------------------------------------------------------------
# Mixture of experts and multi-head latent attention (MLA).
#
# Notation beyond the above: E routed experts, k experts per token (top-k), f_e one routed
# expert's intermediate size, n_s shared experts of width f_s, L_d dense and L_m MoE layers;
# MLA (DeepSeek-AI 2024, DeepSeek-V2 §2.1.2–2.1.3): r_q and r_kv the query and key/value
# compression ranks (d_c' and d_c), d_n the per-head width without rotary (d_h), d_r the
# decoupled rotary width (d_h^R), d_v the per-head value width.


def mla_sharded_params(hidden, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                       qk_rope_head_dim, v_head_dim, has_q_lora=1):
    """MLA's up-projections and output projection, split over t (column/row parallel by heads):

        W^UQ,W^QR  q_in·a·(d_n + d_r)   with q_in = r_q (has_q_lora = 1) or h (no query LoRA:
                                         DeepSeek-V2-Lite projects queries from h directly)
        W^UK,W^UV  r_kv·a·(d_n + d_v)
        W^O        a·d_v·h
    DeepSeek-V2 §2.1.2 eqs. 9–14 and §2.1.3; HF modeling_deepseek_v3 (q_b_proj, kv_b_proj,
    o_proj)."""
    q_in = has_q_lora * q_lora_rank + (1 - has_q_lora) * hidden
    return (q_in * n_heads * (qk_nope_head_dim + qk_rope_head_dim)
            + kv_lora_rank * n_heads * (qk_nope_head_dim + v_head_dim)
            + n_heads * v_head_dim * hidden)


def mla_replicated_params(hidden, q_lora_rank, kv_lora_rank, qk_rope_head_dim, has_q_lora=1):
    """MLA's down-projections and the RMSNorms on the two latents, which every tensor-parallel
    rank holds whole (Megatron-Core builds linear_q_down_proj and linear_kv_down_proj as
    duplicated, not split, linears):

        W^DQ + norm   has_q_lora·(h·r_q + r_q)
        W^DKV, W^KR   h·(r_kv + d_r)     (the shared rotary key comes out of the same matrix)
        norm          r_kv
    """
    return (has_q_lora * (hidden * q_lora_rank + q_lora_rank)
            + hidden * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank)


def mla_attention_params(hidden, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                         qk_rope_head_dim, v_head_dim, has_q_lora=1):
    """All of one MLA block: sharded + replicated. DeepSeek-V3 (h = 7168, a = 128, r_q = 1536,
    r_kv = 512, d_n = 128, d_r = 64, d_v = 128): 187,107,328."""
    return (mla_sharded_params(hidden, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim,
                               qk_rope_head_dim, v_head_dim, has_q_lora)
            + mla_replicated_params(hidden, q_lora_rank, kv_lora_rank, qk_rope_head_dim,
                                    has_q_lora))


def expert_params(hidden, expert_ffn, n_mlp_matrices, bias=0):
    """One expert (an MLP of width f_e): n_mlp·h·f_e, plus with biases (gpt-oss)
    (n_mlp − 1)·f_e + h, the same shapes as mlp_weight_params' and the bias functions'."""
    return n_mlp_matrices * hidden * expert_ffn + bias * ((n_mlp_matrices - 1) * expert_ffn
                                                          + hidden)


def shared_expert_params(hidden, shared_ffn, n_mlp_matrices, n_shared_experts):
    """n_s shared experts of width f_s (DeepSeekMoE, Dai et al. 2024 §3.2): n_s·n_mlp·h·f_s.
    Megatron-Core holds them as one MLP of width n_s·f_s (--moe-shared-expert-intermediate-size),
    split over t like a dense MLP."""
    return n_shared_experts * n_mlp_matrices * hidden * shared_ffn


def dense_layer_params(attention, hidden, ffn, n_mlp_matrices, bias, norm_width):
    """A layer with a dense MLP, given its attention block's parameters `attention` (biases
    included): attention + n_mlp·h·f + bias·((n_mlp − 1)·f + h) + 2 norms. With attention =
    h·d_h(2a + 2k) + bias·(d_h(a + 2k) + h) this is layer_params(…, n_experts=1)."""
    return (attention + expert_params(hidden, ffn, n_mlp_matrices, bias)
            + norm_params(hidden, norm_width))


def moe_layer_params(attention, hidden, expert_ffn, n_mlp_matrices, bias, norm_width, n_experts,
                     n_router_experts, n_shared_experts=0, shared_ffn=0):
    """A MoE layer: attention + E·expert + shared experts + router h·E + 2 norms.
    Called with E = k it counts what one token meets (the active parameters); the router stays
    E_router·h (every token scores every expert). A 1-expert MoE with no router (E = 1,
    E_router = 0, n_s = 0) is dense_layer_params; with standard attention this is
    layer_params(…, n_experts=E, n_router_experts=E)."""
    return (attention + n_experts * expert_params(hidden, expert_ffn, n_mlp_matrices, bias)
            + shared_expert_params(hidden, shared_ffn, n_mlp_matrices, n_shared_experts)
            + router_params(hidden, n_router_experts) + norm_params(hidden, norm_width))


def transformer_params(n_dense_layers, n_moe_layers, dense_layer, moe_layer, vocab, hidden,
                       max_positions, learned_positions, tied_embeddings, norm_width):
    """Ψ = L_d·(dense layer) + L_m·(MoE layer) + V·h·(2 − tied) + positions + final norm.
    With L_m = 0 and dense_layer = layer_params(…) this is model_params. Multi-token-prediction
    modules (DeepSeek-V3 §2.2) are not counted: the published 671B leaves them out too."""
    return (n_dense_layers * dense_layer + n_moe_layers * moe_layer
            + (2 - tied_embeddings) * embedding_params(vocab, hidden)
            + position_embedding_params(max_positions, hidden, learned_positions)
            + norm_width * hidden)
