"""Runs Megatron-LM's own `parse_args` + `validate_args` on emitted arguments, in a Megatron-LM
checkout's Python (test_megatron_lm.py starts it with PYTHONPATH = the checkout), and prints what
Megatron derived as JSON on stdout.

    python megatron_lm_runner.py ARGS_FILE WORLD_SIZE VOCAB

Stubs, for what needs a GPU: torch.cuda.get_device_capability / get_device_properties answer
an H100 (SM 9.0), which validate_args asks when it checks CUDA_DEVICE_MAX_CONNECTIONS (set to 1,
as the settings' note says for TP/CP); `apply_rope_fusion` is turned off before the
TransformerConfig is built (the fused RoPE kernel is Transformer Engine's); fp8 and
`--use-precision-aware-optimizer` (offload) are checked by validate_args but their Transformer
Engine version checks in the config classes are answered yes. The tokenizer is Megatron's
NullTokenizer with the model's vocabulary (no tokenizer files)."""

from __future__ import annotations

import json
import os
import shlex
import sys


def _stub_gpu() -> None:
    import torch

    class _Props:
        major, minor, name, total_memory, multi_processor_count = 9, 0, "stub", 80 << 30, 132

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: _Props()


def _stub_te_versions() -> None:
    import megatron.core.utils as utils

    utils.is_te_min_version = lambda *a, **k: True
    for name in ("megatron.core.transformer.transformer_config",
                 "megatron.core.optimizer.optimizer_config"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "is_te_min_version"):
            module.is_te_min_version = lambda *a, **k: True


def main() -> None:
    path, world, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    argv = shlex.split(open(path).read().replace("\\\n", " "), comments=True)
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0",
                      CUDA_DEVICE_MAX_CONNECTIONS="1")
    if "--use-megatron-fsdp" in argv:  # Megatron-FSDP wants it unset (validate_args asserts)
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS")
    _stub_gpu()
    sys.argv = ["pretrain_gpt.py", *argv, "--tokenizer-type", "NullTokenizer",
                "--vocab-size", str(vocab)]
    from megatron.training.arguments import parse_args, validate_args

    args = validate_args(parse_args())
    _stub_te_versions()
    from megatron.core.tokenizers.utils.build_tokenizer import vocab_size_with_padding
    from megatron.training.arguments import core_transformer_config_from_args

    args.apply_rope_fusion = False
    config = core_transformer_config_from_args(args)
    fields = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
              "num_query_groups", "kv_channels", "layernorm_epsilon", "qk_layernorm",
              "add_bias_linear", "add_qkv_bias", "gated_linear_unit", "normalization",
              "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
              "moe_shared_expert_intermediate_size", "moe_layer_freq",
              "moe_router_score_function", "moe_router_pre_softmax", "moe_router_num_groups",
              "moe_router_group_topk", "moe_router_topk_scaling_factor",
              "moe_router_enable_expert_bias", "mtp_num_layers", "q_lora_rank", "kv_lora_rank",
              "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rotary_scaling_factor",
              "mscale", "mscale_all_dim", "tensor_model_parallel_size",
              "pipeline_model_parallel_size", "context_parallel_size",
              "expert_model_parallel_size", "expert_tensor_parallel_size", "cp_comm_type",
              "hierarchical_context_parallel_sizes", "sequence_parallel")
    out = {f: getattr(config, f, None) for f in fields}
    out.update(
        config_class=type(config).__name__,
        data_parallel_size=args.data_parallel_size,
        micro_batch_size=args.micro_batch_size, global_batch_size=args.global_batch_size,
        virtual_pipeline_model_parallel_size=args.virtual_pipeline_model_parallel_size,
        pipeline_model_parallel_layout=(str(args.pipeline_model_parallel_layout)
                                        if args.pipeline_model_parallel_layout else None),
        rotary_base=args.rotary_base, use_rope_scaling=args.use_rope_scaling,
        rope_scaling_factor=args.rope_scaling_factor,
        untie=args.untie_embeddings_and_output_weights,
        padded_vocab_size=vocab_size_with_padding(vocab, args, logging_enabled=False),
        use_distributed_optimizer=args.use_distributed_optimizer,
        num_distributed_optimizer_instances=args.num_distributed_optimizer_instances)
    print("PLAN3D-JSON " + json.dumps(out, default=str))


if __name__ == "__main__":
    main()
