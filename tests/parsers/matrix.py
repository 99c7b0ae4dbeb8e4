"""The plans the parser suite feeds to the frameworks: (id, explain arguments, formats).

Each row is a `plan3d explain` command line (without --emit); `formats` names the emitters that
express it. The rows cover dense, interleaved and uneven pipelines, every context-parallel kind,
MoE with ep/etp (DeepSeek-V3, Qwen3, Mixtral), FSDP/HSDP, offload, FP8 and every pipeline
schedule each framework runs. Every row fits its GPUs (a plan that does not fit emits nothing)."""

from __future__ import annotations

MEGATRON = ("megatron", "nemo")

ROWS: list[tuple[str, str, tuple[str, ...]]] = [
    # ---- Megatron-Core (Megatron-LM flags, Megatron-Bridge YAML) -------------------------
    ("dense-70b-tp8-pp4", "--model 70b --gpus 64 --tp 8 --pp 4", MEGATRON),
    ("interleaved-70b-vpp5", "--model 70b --gpus 64 --tp 8 --pp 4 --vpp 5 --schedule interleaved",
     MEGATRON),
    ("uneven-70b-pp6", "--model 70b --gpus 96 --tp 8 --pp 6", MEGATRON),
    ("layout-70b-pp4-vpp3", "--model 70b --gpus 64 --tp 8 --pp 4 --vpp 3 "
     "--schedule interleaved", MEGATRON),
    ("cp-ring-70b", "--model 70b --gpus 128 --tp 8 --pp 4 --cp 2 --seq-len 16384 "
     "--cp-kind ring", MEGATRON),
    ("cp-a2a-8b", "--model llama-3.1-8b --gpus 32 --tp 2 --pp 2 --cp 2 --seq-len 16384 "
     "--cp-kind a2a", MEGATRON),
    ("cp-hier-8b", "--model llama-3.1-8b --gpus 64 --tp 2 --pp 2 --cp 4 --seq-len 32768 "
     "--cp-kind hierarchical --cp-a2a 2", MEGATRON),
    ("fsdp-8b-zero3", "--model llama-3.1-8b --gpus 16 --tp 2 --pp 1 --zero 3", MEGATRON),
    ("hsdp-8b", "--model llama-3.1-8b --gpus 32 --tp 2 --pp 1 --zero 1 --dp-shard 4", MEGATRON),
    ("offload-8b", "--model llama-3.1-8b --gpus 16 --tp 1 --pp 1 --zero 1 "
     "--offload-optimizer 1 --recompute full", MEGATRON),
    ("adam-bf16-8b", "--model llama-3.1-8b --gpus 16 --tp 2 --pp 1 --zero 1 --recompute full "
     "--adam-moments bf16", MEGATRON),
    ("fp8-70b", "--model 70b --gpus 64 --tp 8 --pp 4 --precision fp8", MEGATRON),
    ("fp8-blockwise-70b", "--model 70b --gpus 64 --tp 8 --pp 4 --precision fp8 "
     "--fp8-recipe blockwise --fp8-param-gather", ("megatron",)),
    ("recompute-levels-70b", "--model 70b --gpus 64 --tp 8 --pp 4 --recompute full "
     "--recompute-layers 10", MEGATRON),
    ("recompute-uniform-70b", "--model 70b --gpus 64 --tp 8 --pp 4 --recompute full "
     "--recompute-group 4", MEGATRON),
    ("recompute-mlp-8b", "--model llama-3.1-8b --gpus 16 --tp 2 --pp 2 --recompute selective "
     "--recompute-modules core_attn,mlp", MEGATRON),
    ("recompute-moe-modules-qwen3", "--model qwen3-30b-a3b --gpus 32 --tp 2 --pp 2 --ep 8 "
     "--etp 1 --recompute selective --recompute-modules core_attn,layernorm,moe_act",
     ("megatron",)),
    # DeepSeek-V3's own recipe (report §3.2.3): RMSNorm and the MLA up-projections recomputed
    ("recompute-mla-modules-dsv3", "--model deepseek-v3 --gpus 1024 --tp 1 --pp 16 --ep 64 "
     "--etp 1 --recompute selective --recompute-modules layernorm,mla_up_proj "
     "--hw h200-nvlink", ("megatron",)),
    ("recompute-moe-layer-dsv3", "--model deepseek-v3 --gpus 1024 --tp 1 --pp 16 --ep 64 "
     "--etp 1 --recompute selective --recompute-modules core_attn,moe,shared_experts "
     "--hw h200-nvlink", ("megatron",)),
    ("recompute-moe-layer-qwen3", "--model qwen3-30b-a3b --gpus 32 --tp 2 --pp 2 --ep 8 "
     "--etp 1 --recompute selective --recompute-modules core_attn,moe", MEGATRON),
    ("moe-deepseek-v3", "--model deepseek-v3 --gpus 1024 --tp 1 --pp 16 --ep 64 --etp 1 "
     "--recompute full --hw h200-nvlink", ("megatron",)),
    ("moe-qwen3-30b", "--model qwen3-30b-a3b --gpus 32 --tp 2 --pp 2 --ep 8 --etp 1",
     MEGATRON),
    ("moe-qwen3-30b-deepep", "--model qwen3-30b-a3b --gpus 32 --tp 2 --pp 2 --ep 8 --etp 1 "
     "--moe-dispatcher deepep --moe-capacity-factor 1.0", MEGATRON),
    # moe: the 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm), its needs met:
    # ep > 1, virtual stages at pp > 1, selective recompute without `moe` (transformer_config.py
    # l.3002-3046 @ d98e8a64dd)
    ("moe-qwen3-30b-a2a-overlap", "--model qwen3-30b-a3b --gpus 32 --tp 2 --pp 2 --vpp 2 "
     "--schedule interleaved --ep 8 --etp 1 --moe-a2a-overlap --recompute selective "
     "--recompute-modules core_attn,moe_act", ("megatron",)),
    ("moe-qwen3-30b-forced", "--model qwen3-30b-a3b --gpus 32 --tp 2 --pp 2 --ep 8 --etp 1 "
     "--moe-forced-balance", MEGATRON),
    ("moe-mixtral-8x7b", "--model mixtral-8x7b --gpus 64 --tp 2 --pp 4 --ep 8 --etp 2",
     MEGATRON),
    # ---- torchtitan ------------------------------------------------------------------------
    ("titan-fsdp-8b", "--model llama-3.1-8b --gpus 16 --framework torchtitan --tp 1 --pp 1",
     ("torchtitan",)),
    ("titan-1f1b-70b", "--model 70b --gpus 64 --framework torchtitan --tp 8 --pp 4 "
     "--schedule 1f1b", ("torchtitan",)),
    ("titan-gpipe-70b", "--model 70b --gpus 64 --framework torchtitan --tp 8 --pp 4 "
     "--schedule gpipe --gbs 16 --recompute full", ("torchtitan",)),
    ("titan-interleaved-70b", "--model 70b --gpus 64 --framework torchtitan --tp 8 --pp 4 "
     "--vpp 2 --schedule interleaved", ("torchtitan",)),
    ("titan-zbv-70b", "--model 70b --gpus 64 --framework torchtitan --tp 8 --pp 4 "
     "--schedule zbv", ("torchtitan",)),
    ("titan-dualpipev-70b", "--model 70b --gpus 64 --framework torchtitan --tp 8 --pp 4 "
     "--schedule dualpipev", ("torchtitan",)),
    ("titan-uneven-405b", "--model 405b --gpus 512 --framework torchtitan --tp 8 --pp 16 "
     "--schedule 1f1b --recompute full --precision fp8", ("torchtitan",)),
    ("titan-module-lists-8b", "--model llama-3.1-8b --gpus 40 --framework torchtitan --tp 1 "
     "--pp 5 --vpp 2 --schedule interleaved --gbs 80", ("torchtitan",)),
    ("titan-cp-70b", "--model 70b --gpus 128 --framework torchtitan --tp 8 --pp 4 --cp 2 "
     "--seq-len 16384", ("torchtitan",)),
    ("titan-hsdp-8b", "--model llama-3.1-8b --gpus 32 --framework torchtitan --tp 1 --pp 1 "
     "--dp-shard 8", ("torchtitan",)),
    ("titan-offload-8b", "--model llama-3.1-8b --gpus 8 --framework torchtitan --tp 1 --pp 1 "
     "--offload-params --offload-optimizer 1", ("torchtitan",)),
    ("titan-fp8-70b", "--model 70b --gpus 64 --framework torchtitan --tp 8 --pp 4 "
     "--precision fp8", ("torchtitan",)),
    # fit: the loss compiled alone (compile.components ["loss"])
    ("titan-compile-loss-8b", "--model llama-3.1-8b --gpus 16 --framework torchtitan --tp 1 "
     "--pp 1 --compile-loss", ("torchtitan",)),
    # ---- DeepSpeed (with a Megatron-DeepSpeed-style mpu) -----------------------------------
    ("ds-zero1-pp-8b", "--model llama-3.1-8b --gpus 32 --framework deepspeed --tp 2 --pp 4 "
     "--zero 1", ("deepspeed",)),
    ("ds-zero2-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 1 --pp 1 "
     "--zero 2", ("deepspeed",)),
    ("ds-zero3-offload-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 1 "
     "--pp 1 --zero 3 --offload-optimizer 1 --offload-params", ("deepspeed",)),
    ("ds-ulysses-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 1 --pp 1 "
     "--cp 4 --zero 2 --no-sp --seq-len 32768", ("deepspeed",)),
    ("ds-fp16-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 2 --pp 2 "
     "--zero 1 --precision fp16", ("deepspeed",)),
    # fit: activation checkpointing's partition_activations and cpu_checkpointing
    ("ds-ac-partition-cpu-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 2 "
     "--pp 2 --zero 1 --no-sp --recompute full --distribute-saved-activations "
     "--offload-activations 16", ("deepspeed",)),
    ("ds-ac-cpu-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 2 --pp 1 "
     "--zero 1 --no-sp --recompute full --offload-activations 32", ("deepspeed",)),
    ("ds-ac-contiguous-8b", "--model llama-3.1-8b --gpus 16 --framework deepspeed --tp 2 "
     "--pp 2 --zero 1 --no-sp --recompute full --distribute-saved-activations "
     "--contiguous-checkpoints", ("deepspeed",)),
    # moe: AutoEP (the JSON's expert_parallel section over a Hugging Face model)
    ("ds-autoep-qwen3-z2", "--model qwen3-30b-a3b --gpus 64 --framework deepspeed --tp 1 "
     "--pp 1 --ep 8 --zero 2", ("deepspeed",)),
    ("ds-autoep-qwen3-z3-deepep", "--model qwen3-30b-a3b --gpus 32 --framework deepspeed "
     "--tp 1 --pp 1 --ep 16 --zero 3 --moe-dispatcher deepep", ("deepspeed",)),
    ("ds-autoep-mixtral-z3", "--model mixtral-8x7b --gpus 32 --framework deepspeed --tp 1 "
     "--pp 1 --ep 8 --zero 3 --recompute full", ("deepspeed",)),
    ("ds-autoep-dsv3-z3", "--model deepseek-v3 --gpus 256 --framework deepspeed --tp 1 --pp 1 "
     "--ep 32 --zero 3 --recompute full", ("deepspeed",)),
]
