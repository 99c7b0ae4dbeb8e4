"""What each named quantity of the cost model is: its symbol, unit, group and why it matters.

The keys are the names plan_costs notes; explain shows them in this order."""

from __future__ import annotations

from typing import NamedTuple


class TermInfo(NamedTuple):
    symbol: str
    unit: str  # "params", "bytes", "s", "fraction", "FLOPs", "tokens/s", "micro-batches", "count"
    group: str  # "model", "memory", "comm", "pipeline", "time"
    why: str


TERMS: dict[str, TermInfo] = {
    "n_params": TermInfo("Ψ", "params", "model",
                         "all parameters: L layers of attention, MLP and norms, embeddings, head"),
    "vocab_padded": TermInfo("V′", "count", "model",
                             "vocabulary padded to a multiple of 128·t so each TP slice is even"),
    "stage_layers": TermInfo("L_s", "count", "pipeline",
                             "layers on the fullest stage: L/p, or v·⌈L/(p·v)⌉ when uneven; "
                             "⌈(L + D)/p⌉ with D MTP modules in Megatron's layout"),
    "params_first_stage": TermInfo("Ψ_first", "params", "memory",
                                   "first stage's share per GPU: L/p layers over t + embedding"),
    "params_last_stage": TermInfo("Ψ_last", "params", "memory",
                                  "last stage's share per GPU: L/p layers over t + LM head"),
    "moe_layers_first": TermInfo("n_moe,first", "count", "memory",
                                 "MoE layers on the first pipeline rank: those of its chunks "
                                 "under the framework's split (dense first_k_dense layers "
                                 "first)"),
    "moe_layers_last": TermInfo("n_moe,last", "count", "memory",
                                "MoE layers on the last pipeline rank (its chunks; MTP modules "
                                "count as MoE layers where Megatron places them)"),
    "moe_layers_timed": TermInfo("n_moe,s", "count", "pipeline",
                                 "MoE layers the step's expert exchange and MoE time count: the "
                                 "fullest stage's L_s layers taken at the model's end"),
    "stage_params": TermInfo("Ψ_gpu", "params", "memory",
                             "parameters on the most loaded GPU (the stage that needs most memory)"),
    "weights_bytes": TermInfo("M_w", "bytes", "memory",
                              "weights as the framework keeps them (Megatron, DeepSpeed 16-bit; "
                              "torchtitan's FSDP2 fp32 shards); over d·c where it shards them"),
    "gradients_bytes": TermInfo("M_g", "bytes", "memory",
                                "gradients as the framework keeps them (Megatron's fp32 main_grad, "
                                "torchtitan fp32, DeepSpeed 16-bit + its fp32 copy); sharded from "
                                "ZeRO-2"),
    "optimizer_bytes": TermInfo("M_opt", "bytes", "memory",
                                "Adam: fp32 master + m + v (torchtitan: m + v, its weights are the "
                                "fp32 master); sharded from ZeRO-1"),
    "recomputed_layers": TermInfo("r", "count", "memory",
                                  "layers of the stage recomputed fully, the rest keeping every "
                                  "activation (Megatron --recompute-method block "
                                  "--recompute-num-layers r)"),
    "layer_activation_bytes": TermInfo("A_layer", "bytes", "memory",
                                       "one layer's saved activations for one micro-batch "
                                       "(Korthikanti 2022 Table 2; torchtitan: what its per-op "
                                       "policy keeps)"),
    "layer_all_bytes": TermInfo("A_layer,all", "bytes", "memory",
                                "one layer's activations with nothing recomputed: what the "
                                "layer under backward holds for a moment once it has rerun "
                                "what recompute dropped"),
    "inflight_first": TermInfo("n_f", "micro-batches", "pipeline",
                               "micro-batches the first stage holds at its peak (schedule)"),
    "inflight_last": TermInfo("n_l", "micro-batches", "pipeline",
                              "micro-batches the last stage holds at its peak"),
    "logits_bytes": TermInfo("A_logits", "bytes", "memory",
                             "fp32 logits the loss passes over on the last stage (its time)"),
    "loss_bytes": TermInfo("A_loss", "bytes", "memory",
                           "the loss at its peak on the last stage: the final norm's and LM "
                           "head's inputs and the framework's cross entropy (Megatron: 16-bit "
                           "logits + fp32 softmax, 6·s·b·V/t; torchtitan: 12·s·b·V/t, "
                           "compiled 4·s·b·V/t)"),
    "backward_gradient_bytes": TermInfo("A_grad", "bytes", "memory",
                                        "activation gradients of the layer under backward: the "
                                        "residual stream's (full sequence) and the MLP's f-wide "
                                        "ones, act·(s/c)·b·(h + (n−1)·f/t)"),
    "activations_bytes": TermInfo("M_act", "bytes", "memory",
                                  "in-flight micro-batches × layers × per-layer activations"),
    "nccl_bytes": TermInfo("M_nccl", "bytes", "memory",
                           "NCCL's buffers: per communicator of more than one rank, one "
                           "connection's LL/LL128/Simple FIFOs per ring channel, NVLS's per head "
                           "where the switch has it; point-to-point FIFOs per pipeline "
                           "neighbour and all-to-all peer (NCCL @ 5067397c)"),
    "workspace_bytes": TermInfo("M_ws", "bytes", "memory",
                                "GEMM workspaces: PyTorch's cuBLAS + cuBLASLt per thread "
                                "(main, autograd), Transformer Engine's where the framework "
                                "runs it"),
    "overhead_bytes": TermInfo("M_rt", "bytes", "memory",
                               "runtime outside the allocator (CUDA context M_ctx, NCCL), the "
                               "GEMM workspaces, the "
                               "allocator's slack, and what the framework holds beside the "
                               "states: gathered ZeRO-3 layers, unsharded pipelined FSDP2 state, "
                               "buckets, fp8 weight copies"),
    "total_bytes": TermInfo("M", "bytes", "memory", "what the most loaded GPU needs"),
    "tp_layer_bytes": TermInfo("V_tp,layer", "bytes", "comm",
                               "two all-reduces of b·s·h per layer and direction"),
    "tp_bytes": TermInfo("V_tp", "bytes", "comm",
                         "tensor-parallel traffic per GPU per step (∝ activations)"),
    "pp_boundary_bytes": TermInfo("V_pp,msg", "bytes", "comm",
                                  "one stage-boundary activation, split over t"),
    "pp_bytes": TermInfo("V_pp", "bytes", "comm", "pipeline point-to-point traffic per GPU"),
    "cp_bytes": TermInfo("V_cp", "bytes", "comm", "context-parallel K/V exchange per GPU"),
    # ---- cp-kind: shown where the plan's context parallelism runs an all-to-all ----
    "cp_a2a_layer_bytes": TermInfo("V_cp,a2a", "bytes", "comm",
                                   "all-to-all of Q, K, V and the output over c_a ranks, per "
                                   "layer and micro-batch, forward and backward"),
    "cp_ring_layer_bytes": TermInfo("V_cp,ring", "bytes", "comm",
                                    "K/V ring over the c/c_a all-to-all groups, per layer and "
                                    "micro-batch"),
    "cp_a2a_layer_s": TermInfo("T_cp,a2a", "s", "time",
                               "one layer's CP all-to-alls, exposed (the attention waits for "
                               "them)"),
    "cp_ring_layer_s": TermInfo("T_cp,ring", "s", "time",
                                "one layer's ring passes, hidden under the attention blocks"),
    "dp_bytes": TermInfo("V_dp", "bytes", "comm",
                         "data-parallel traffic (∝ parameters); its form follows the ZeRO stage"),
    "bubble_fraction": TermInfo("β", "fraction", "pipeline",
                                "the schedule's idle share while the pipeline fills and "
                                "drains (of the whole step: T_bubble/T_step)"),
    "model_flops": TermInfo("F_model", "FLOPs", "time",
                            "3 passes of every matmul and attention product (MFU's numerator)"),
    "hardware_flops": TermInfo("F_hw", "FLOPs", "time",
                               "FLOPs that run: causal half under flash, + recomputation (HFU)"),
    "wave_efficiency": TermInfo("w", "fraction", "time",
                                "GEMM tiles' last-wave occupancy: thin TP slices waste more"),
    "matmul_s": TermInfo("T_mm", "s", "time", "one layer's forward GEMMs, one micro-batch, per GPU"),
    "attention_s": TermInfo("T_att", "s", "time", "one layer's QKᵀ and P·V (causal half if "
                            "flash; a flash kernel at its measured rate where the profile has "
                            "one, η_att, on the head widths it pads to, π_att)"),
    "elementwise_s": TermInfo("T_elem", "s", "time",
                              "norms, residuals, activation functions: HBM-bound"),
    "attention_core_s": TermInfo("T_core", "s", "time",
                                 "materialised softmax/dropout traffic (classic attention only)"),
    "forward_layer_s": TermInfo("T_fwd", "s", "time", "one layer's forward pass"),
    "backward_layer_s": TermInfo("T_bwd", "s", "time", "one layer's backward pass (2× forward; "
                                 "flash attention 2.5× its FLOPs — (3·d_qk + 2·d_v)/(d_qk + d_v) "
                                 "under MLA — at its backward rate η_att,b where measured)"),
    "recompute_layer_s": TermInfo("T_rec", "s", "time", "forward work recomputed in the backward"),
    "op_sac_share": TermInfo("ρ_sac", "fraction", "time",
                             "torchtitan's per-op selective AC: share of the layer's matmul "
                             "weights rerun (every second mm, the router gate, the grouped "
                             "expert GEMMs); T_rec = ρ_sac·T_mm + the forward's unsaved ops"),
    "op_sac_mean_share": TermInfo("ρ̄_sac", "fraction", "time",
                                  "ρ_sac over every layer, dense and MoE (hardware FLOPs)"),
    "quantize_layer_s": TermInfo("T_q", "s", "time",
                                 "the recipe's casts of a layer's linear inputs and output "
                                 "gradients to fp8/fp4, memory-bound (formulas.quantization)"),
    "tp_layer_s": TermInfo("T_tp", "s", "time",
                           "one direction's TP collectives of a layer on the link they cross"),
    "head_s": TermInfo("T_head", "s", "time", "LM head and loss on the last stage"),
    "compute_microbatch_s": TermInfo("T_mb", "s", "time",
                                     "a stage's compute for one micro-batch"),
    "dp_reduce_s": TermInfo("T_rs", "s", "time",
                            "the step's data-parallel gradient reduction (all-reduce or "
                            "reduce-scatter)"),
    "dp_gather_s": TermInfo("T_ag", "s", "time",
                            "the step's gather of updated weights (ZeRO-1/2 all-gather)"),
    "dp_tail_s": TermInfo("T_dp", "s", "time", "the data-parallel gradient reduction"),
    "dp_reduce_pieces": TermInfo("n_rs", "count", "comm",
                                 "the pieces the framework issues the reduction in, one after "
                                 "another as their gradients complete: Megatron's and "
                                 "DeepSpeed's buckets, FSDP2's blocks"),
    "dp_gather_pieces": TermInfo("n_ag", "count", "comm",
                                 "the pieces it gathers the updated weights in, each fetched "
                                 "ahead of the forward that needs it (1: all at once)"),
    "dp_reduce_exposed_s": TermInfo("T_rs,exp", "s", "time",
                                    "the part of T_rs the backward does not hide, as the "
                                    "framework issues it: max(T_rs/n, T_rs − W·(n−1)/n) for n "
                                    "pieces beside W (Megatron: buckets in the last backward, "
                                    "the last one exposed; v chunks p backwards apart when "
                                    "interleaved; DeepSpeed's pipeline: none hidden)"),
    "dp_gather_exposed_s": TermInfo("T_ag,exp", "s", "time",
                                    "the part of T_ag the next forward does not hide: the same "
                                    "form, the first piece exposed (Megatron's buckets, v chunks "
                                    "when interleaved; DeepSpeed gathers in its optimizer step: "
                                    "none hidden); Megatron's later pipeline stages add "
                                    "(p − 1)·T_ag, each gathering whole before its first forward"),
    "dp_reduce_ep_delay_s": TermInfo("T_rs,ep", "s", "time",
                                     "moe: the exposed expert exchange's wait for the reduction "
                                     "beside it on a shared link (fair link, the reduction "
                                     "spread over the backward): T_rs's own time × the "
                                     "exchange's F/(W + F) of the phase, at most F"),
    "dp_gather_ep_delay_s": TermInfo("T_ag,ep", "s", "time",
                                     "moe: the same for the gather beside the first forward's "
                                     "exchange"),
    "dp_tail_exposed_s": TermInfo("T_dp,tail", "s", "time",
                                  "the part of T_rs and T_ag the backward and the next forward "
                                  "do not hide, and the slowdown σ of what they hide under"),
    "zero_fwd_s": TermInfo("T_z,fwd", "s", "time",
                           "ZeRO-3's weight gathers of one micro-batch's forward, every group "
                           "(the experts' edp group too), alone on their links"),
    "zero_bwd_s": TermInfo("T_z,bwd", "s", "time",
                           "ZeRO-2/3's collectives of one micro-batch's backward: ZeRO-3's "
                           "regathers and the gradients' reduce-scatter, every group"),
    "zero_rs_s": TermInfo("T_z,rs", "s", "time",
                          "the gradients' reduce-scatter of one micro-batch's backward (the "
                          "dense group's): part of T_z,bwd; DeepSpeed's last bucket, T_z,rs/n, "
                          "waits after the backward (T_z,mb)"),
    "zero_microbatch_exposed_s": TermInfo("T_z,mb", "s", "time",
                                          "ZeRO-2/3's collectives per micro-batch that its "
                                          "compute does not hide (the forward's gathers beside "
                                          "the forward, the rest beside the backward, each "
                                          "max(T/n, T − W·(n−1)/n) for the framework's n pieces: "
                                          "FSDP2 blocks; DeepSpeed's first fetch and last "
                                          "reduce bucket), with σ of the hidden part; "
                                          "averaged over the m micro-batches where they run "
                                          "fewer times (FSDP2 under pp: once a step, ×1/m)"),
    "optimizer_s": TermInfo("T_opt", "s", "time", "Adam step, HBM-bound, on the local shard"),
    "stage_microbatch_s": TermInfo("T_stage", "s", "time",
                                   "one micro-batch through the slowest stage, exposed comm included"),
    "compute_s": TermInfo("T_compute", "s", "time", "m micro-batches of compute"),
    "tp_exposed_s": TermInfo("T_tp,exp", "s", "time", "TP communication compute does not hide"),
    "cp_exposed_s": TermInfo("T_cp,exp", "s", "time", "CP communication not hidden under attention"),
    "pp_exposed_s": TermInfo("T_pp,exp", "s", "time", "pipeline sends per micro-batch"),
    "dp_exposed_s": TermInfo("T_dp,exp", "s", "time",
                             "DP/ZeRO traffic not hidden under the backward pass"),
    "bubble_s": TermInfo("T_bubble", "s", "time", "(p−1)/v slots of the stage time"),
    "straggler_s": TermInfo("T_strag", "s", "time",
                            "the wait for the slowest of N = c·d·p·t GPUs beyond the slowest of "
                            "8 (the efficiencies' own): z(N) the expected maximum of N normal "
                            "speeds (Gumbel limit)"),
    "step_s": TermInfo("T_step", "s", "time",
                       "the step: T_stage·(m + (p−1)/v) + DP tail + optimizer + stragglers"),
    "tokens_per_s": TermInfo("τ", "tokens/s", "time", "B·s / T_step"),
    "model_flops_causal": TermInfo("F_causal", "FLOPs", "time",
                                   "model FLOPs counting the causal half of attention's s×s "
                                   "square (Megatron-Core's MFU numerator)"),
    "mfu": TermInfo("MFU_full", "fraction", "time",
                    "model FLOPs, whole attention square / (T_step · N · peak)"),
    "mfu_causal": TermInfo("MFU_causal", "fraction", "time",
                           "model FLOPs, causal half / (T_step · N · peak), as Megatron-Core logs"),
    # ---- goodput: failures, checkpoints and restarts (model/goodput.py) ----
    "checkpoint_bytes": TermInfo("S_ckpt", "bytes", "time",
                                 "the checkpoint: each parameter once with the bytes the "
                                 "framework saves of it (weight + optimizer state: Megatron, "
                                 "DeepSpeed 14, torchtitan 12)"),
    "checkpoint_write_s": TermInfo("δ", "s", "time",
                                   "writing it, every GPU its share at once at W_ckpt each "
                                   "(the profile's storage section)"),
    "mtbf_s": TermInfo("T_MTBF", "s", "time",  # not M: M is the memory a GPU needs
                       "the job's mean time between interruptions: N GPUs at λ_fail per "
                       "GPU-hour each (Llama 3 §3.3.4: 419 in 54 days on 16,384)"),
    "restart_s": TermInfo("T_restart", "s", "time",
                          "an interruption's restart: relaunch T_launch and reading the "
                          "checkpoint back"),
    "checkpoint_interval_s": TermInfo("τ_ckpt", "s", "time",
                                      "the optimal checkpoint interval (Young 1974; Daly 2006 "
                                      "eq. 37)"),
    "goodput": TermInfo("G", "fraction", "time",
                        "share of the wall clock that trains: checkpoints take δ of each "
                        "τ_ckpt + δ, each failure T_restart and half an interval; days and cost use it"),
    # ---- moe: shown for MoE/MLA models only ----
    "expert_stage_params": TermInfo("Ψ_exp", "params", "memory",
                                    "routed experts on the GPU: the stage's MoE layers' experts "
                                    "over ep·etp; ZeRO shards their states over edp"),
    "moe_dispatch_buffer_bytes": TermInfo("A_a2a", "bytes", "memory",
                                          "all-to-all send and receive buffers of k token "
                                          "copies in flight"),
    "mtp_depth": TermInfo("D", "count", "model",
                          "multi-token-prediction modules trained, on the last stage, each in a "
                          "layer slot of the split (0 without)"),
    "mtp_s": TermInfo("T_mtp", "s", "time",
                      "the MTP modules' projection and extra head-and-loss pass per micro-batch "
                      "(their layers are in the stage's layer slots)"),
    "mtp_bytes": TermInfo("A_mtp", "bytes", "memory",
                          "the MTP modules' projection and head inputs in flight and their "
                          "losses at peak, on the last stage"),
    "moe_load": TermInfo("λ", "fraction", "time",
                         "busiest expert-parallel rank's routed tokens over the mean: the "
                         "balancing's skew over ep ranks plus the batch's sampling noise"),
    "moe_router_permute_s": TermInfo("T_route", "s", "time",
                                     "one MoE layer's router and token permutation (HBM-bound) "
                                     "and their kernels, forward"),
    "moe_atomic_scatter_s": TermInfo("T_scat", "s", "time",
                                     "Megatron's un-fused un-permutation (no --moe-permute-"
                                     "fusion), torchtitan's scatter_add: its atomic "
                                     "scatter-add at W_sc beyond the "
                                     "streaming pass, forward; once more in the backward "
                                     "(index_add_)"),
    "moe_weighting_s": TermInfo("T_weigh", "s", "time",
                                "the routed rows weighed by their scores in a pass of their "
                                "own (Megatron's un-fused un-permutation; torchtitan's, cast "
                                "to fp32 and back) with the zero-filled output, HBM-bound, "
                                "forward; twice in the backward"),
    "moe_host_wait_s": TermInfo("T_host", "s", "time",
                                "one MoE layer's forward from the host's wait for the token "
                                "counts (the framework's sync): the first launch, or the "
                                "host's excess n·t_h − G over the GPU; forward only"),
    "expert_wave_efficiency": TermInfo("w_exp", "fraction", "time",
                                       "grouped expert GEMMs: tokens per expert padded to "
                                       "tiles, tiles in waves"),
    "shared_matmul_s": TermInfo("T_sh", "s", "time",
                                "one MoE layer's shared-expert GEMMs, forward, one micro-batch, "
                                "per GPU: 2·b·s·n_s·n·h·f_s over t·c at the non-expert GEMMs' "
                                "wave efficiency (part of T_mm)"),
    "expert_matmul_s": TermInfo("T_exp", "s", "time",
                                "one MoE layer's expert GEMMs on the busiest GPU (× load)"),
    "all_to_all_s": TermInfo("T_a2a", "s", "time",
                             "one token dispatch (or combine) over the ep group's links"),
    "ep_layer_s": TermInfo("T_ep,layer", "s", "time",
                           "every expert-parallel call of a MoE layer per micro-batch, forward "
                           "and backward, before overlap"),
    "ep_bytes": TermInfo("V_ep", "bytes", "comm",
                         "bytes the expert exchange sends per GPU per step: every call priced, "
                         "on NVLink and the network"),
    "ep_share": TermInfo("σ_ep", "fraction", "comm",
                         "share of its link the expert exchange gets beside PP's sends "
                         "(Megatron's interleaved schedule overlaps them)"),
    "ep_exposed_s": TermInfo("T_ep,exp", "s", "time",
                             "all-to-all not overlapped with compute"),
    "nvlink_busy_s": TermInfo("T_nvl,busy", "s", "comm",
                              "time NVLink is busy per step: every group's traffic on it at its "
                              "bus bandwidth (the step cannot be shorter)"),
    "network_busy_s": TermInfo("T_net,busy", "s", "comm",
                               "time the network (the GPU's NICs) is busy per step: every "
                               "group's traffic on it (the step cannot be shorter)"),
    # ---- offload: shown for plans that offload to host memory ----
    "host_bytes": TermInfo("M_host", "bytes", "memory",
                           "host memory per GPU: the offloaded optimizer states (f of them) and "
                           "the host gradient copy the CPU step reads, the parameters' states "
                           "with parameter offload, and the offloaded layers' activations"),
    "cpu_optimizer_s": TermInfo("T_cpu", "s", "time",
                                "the CPU's Adam step over the offloaded parameters, bound by "
                                "host DRAM bandwidth (28 B per parameter)"),
    "offload_step_s": TermInfo("T_off,step", "s", "time",
                               "what the offloaded optimizer step adds: gradients down, the CPU "
                               "step, weights up (Megatron overlaps the three: their max)"),
    "offload_microbatch_s": TermInfo("T_off,mb", "s", "time",
                                     "per micro-batch, the host-link copies (parameters with "
                                     "parameter offload, activations) compute does not hide"),
    "offload_d2h_bytes": TermInfo("V_d2h", "bytes", "comm",
                                  "bytes per step copied to the host over the host link "
                                  "(PCIe or NVLink-C2C)"),
    "offload_h2d_bytes": TermInfo("V_h2d", "bytes", "comm",
                                  "bytes per step copied back to the GPU over the host link"),
    "offload_s": TermInfo("T_off", "s", "time",
                          "the step time offload adds: T_off,step + m·T_off,mb"),
}

# Sub-terms a formula names for itself, noted together as "term:kinds:label" (kinds
# comma-separated; label: the phase and the group, "rs,dp"); explain shows each under its term
# as `prefix_label`, with this text.
SUB_TERMS: dict[str, tuple[str, str, str]] = {  # kind: (prefix, unit, text)
    "own": ("O", "s", "the collective's own seconds on this group's link at its share of it "
                 "(NCCL's pick × the share), for the exchange beside it"),
    "flow": ("F", "s", "the exposed expert exchange's seconds per micro-batch on the same link, "
                  "apportioned by its bytes there"),
}
