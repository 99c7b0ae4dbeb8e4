"""Published MoE training runs (planner/reference/published_moe.json: Megatron-Core's MoE model
zoo, Megatron-LM's DeepSeek-V3 GB200 write-up, the DeepSeek-V3 report, two community Qwen3-30B-A3B
runs, three torchtitan DeepSeek-V3 16B runs) against the time model. Nothing is fitted to them.

Each run is costed with its stated layout, dispatcher, overlap, forced balance and capacity
factor, and what the source leaves out as the row's `assumed` says (ZeRO-1, 16-bit gradient
reduce, SP with tp > 1, mbs 1 where unstated, selective recompute for Megatron's fine-grained
modules). Where a row gives TFLOPS and no step time, the step is the model FLOPs over the TFLOPS:
Megatron counts causal attention, and where a row gives both, plan3d's causal FLOPs per step
agree with Megatron's to 1 % (test_flop_convention_matches_megatron), so the conversion adds no
error of its own.

Tolerance, and why. With the MoE terms of issue 23 the ten first rows come out −43 … +78 %; before
them (flat λ = 1.25, NCCL all-to-all only, DualPipe-style overlap) −50 … +53 %. Three rows are
outside what the model can express and are held to their direction only: the GB200 baseline
(−43 %: its source names host overhead — kernel launch gaps — as the loss the later rows remove,
and plan3d does not model the host), Qwen3-235B at TP4 EP8 without recompute (−34 %: slower
than the same job with recompute and a smaller TP in the same table, which no cost term
explains), and DeepSeek-V3's own run (+78 %: DualPipe hides its exchange, which plan3d can only
express through Megatron's 1F1B merge, which needs virtual stages this batch cannot group; costed
exposed, an upper bound; and its MTP module's extra head pass is costed on the fullest stage,
as the head is). The seven others (−22 … +23 %, median |error| 8 %; eight with the eleventh
row below) must keep a median |error| ≤ 15 % and each within ±30 % (the spread of unstated settings: recompute modules, uneven
pipeline layouts, dropless imbalance of a benchmark's first steps).

Transformer Engine's grouped GEMM (one cuBLAS GEMM per local expert over 4 streams) moved the
rows with few rows per expert most: Qwen3-235B at TP4 EP8 −40 → −34 %, Qwen3-30B-A3B −26 → −25 %
(its experts see 4,096 rows each: the waves were already full; what it still lacks is not in
any sourced term — see the README's MoE section). Pricing each expert-parallel call as NCCL
runs it (issue 22: per-call latency, the probabilities' all-to-all, the counts' all-gather)
moved the all-to-all rows by under 1 point: median 7.6 → 8.0 %. Costing the Qwen3-30B-A3B run as
it ran, on Megatron-Core's un-fused permutation (`permute_fusion` false: its script sets no
--moe-permute-fusion), whose un-permutation scatter-adds atomically (moe_layer.SCATTER_ADD_BYTES_PER_S,
TileOPs' H200 measurement), moved it −24.2 → −15.4 %; the other rows ran fused and did not move
(median 8.0 %). The exchange sharing its link with the data-parallel collectives beside it
(its exposed part delayed by them), V_ep from the calls, DeepEP's token slots and barriers
moved the rows by under 1 point, the median not at all (8.035 %, the pp32 all-to-all row):
DeepSeek-V3's report +81.5 → +82.0 %, Qwen3-235B EP32 +23.4 → +24.2 %, its overlapped run
−0.1 → +0.1 %, Qwen3-235B TP4 EP8 −34.1 → −33.9 %, Qwen3-30B-A3B −15.4 → −15.3 %.

Small-expert rows. The eleventh row is the same source's second Qwen3-30B-A3B measurement (tp1
pp4 ep4, GBS 256, 20.992 s), added as its table gives it and costed as the first: −14.8 %.
No cost term moved for it; the kept rows' median |error| goes 8.0 → 11.4 % (eight rows,
−22 … +24 %), inside the 15 % bound. Both small-expert rows sit at −15 %: one source, one
script (un-fused permutation, capacity 1.0), so they agree with each other rather than show
whether the bias holds elsewhere.

Two independent small-expert rows (issue 23's last item): torchtitan's DeepSeek-V3 16B flavor
(2.4B active, 64 experts of width 1,408, top-6) on one node, FSDP2 × EP8, local batch 4 × 4,096,
eager but for the loss: a user's 8 H100 in torchtitan#1789 (1.423 s a step from its log's
timestamps) and Lambda's 8 B200 in torchtitan PR 1993 (about 13.5 % MFU, 0.940 s). plan3d
costs them at 0.771 s (−46 %) and 0.377 s (−60 %): both too fast, held to that direction. So
all four small-expert rows, from three sources and two frameworks, come out too fast (−15, −15,
−46, −60 %; median −31 %): the bias is systematic. What the pair says, not fitted: the measured
step shrinks 1.51× from H100 to B200, plan3d's 2.05×. With the GPU part G scaling as plan3d
scales it, T = G + H on both gives G ≈ 0.95 s on H100 (plan3d: 0.77) and a GPU-independent
H ≈ 0.48 s a step: host-side time, which plan3d prices only as t_k per kernel (4 µs) on the GPU. torchtitan's EP dispatch synchronises
the host with the device once per MoE layer's forward (`input_splits.tolist()`,
torchtitan/distributed/expert_parallel.py l.113–120 @ 99fee810b), emptying the launch queue;
its router, permutation and experts run as eager kernels.

What torchtitan's step runs that plan3d did not cost, from its source at the rows' commits:
its per-op selective AC reruns every second `aten.mm` of a block, the router gate and the routed
experts' `torch._grouped_mm` (not in its save list) with every op it does not save, and, the
flex-attention model not being compiled, its attention module whole (full AC): 86 % of a MoE
layer's matmul FLOPs and the attention product (formulas.recompute.op_sac_recomputed_weights,
op_sac_regions), where plan3d had rerun the attention product alone; and its MoE un-permutes
with an atomic `scatter_add`, whose gather's backward is another (models/moe/moe.py @
176498cd4), costed at TileOPs' measured rate as Megatron's un-fused path is. The H100 row moves
−45.8 → −24.8 %, the B200 row −59.9 → −36.2 % (still held to direction); no Megatron row moves.
What is left is 0.35 s a step on H100 and 0.34 s on B200: the same on both GPUs, as host-side
time would be.

The host's wait itself is costed since (T_host, formulas/host.py: a layer's forward from an
empty launch queue is max(G + t_h, n·t_h), t_h = 6 µs a kernel from a micro-benchmark and
tritonbench's cuLaunchKernel): every row's layers are GPU-bound at it, so each MoE layer's
forward gains one launch and the rows move by under 0.1 point (the torchtitan pair −24.83 →
−24.81 %, −36.15 → −36.13 %; the kept median 11.4 % unchanged). The rest is not that wait: a
host-bound forward would need n·t_h ≈ 22 ms a layer on H100 and 18 ms on B200 (the gap over the
26 MoE layers plus plan3d's forward), two host times for one program — 250 µs for each of the
90 kernels counted.

What the small-expert rows still lacked, counted from the frameworks' source and a kernel
benchmark (nothing fitted to these rows): (1) the pass that weighs the routed rows by their
scores outside a fused kernel (formulas.moe_layer.score_weighting_bytes) — Megatron-Core's
un-fused `unpermute` multiplies them in 16 bits and zero-fills its output; torchtitan casts
them to fp32 and back around the multiply (20 B a value) and zero-fills and copies its output
(token_dispatcher.py's combine in 0.3.0, MoE.forward @ 0cfbd0b3c, 176498cd4, v0.2.2);
(2) torch._grouped_mm, torchtitan's expert kernel, reaching 0.35 of B200's bf16 peak at MoE
shapes, forward + backward (torchao's microbenchmark, the b200-nvlink profile's grouped_mm_16),
where the dense GEMM figure (0.61) had been taken. Qwen3-30B-A3B −15.3 → −13.1 % and
−14.8 → −12.6 %, torchtitan 16B H100 −24.8 → −14.3 % (the weighing alone; H100 has no
grouped-GEMM measurement) and B200 −36.1 → −18.5 %; no other row moved. The torchtitan pair
is inside the tolerance now and kept (ten rows: median |error| 12.9 %, max 24.3 %); all four
small-expert rows are still on the fast side (−13 … −19 %), a bias the model keeps.

The same B200 notes' second line, activation checkpointing off ('around 16 %' MFU, 0.793 s),
is the fourteenth row, costed as the first with no recompute: −25.1 %, kept (eleven rows:
median |error| 13.1 %, max 25.1 %). The model drops 0.172 s of recompute where the notes'
MFU drops ≈ 0.147 s: it is the part of the step both keep that is too fast.

Attention at the measured rates of the kernel each framework runs, forward and backward (the
profiles' [efficiency.attention], from kernel benchmarks: Megatron's cuDNN fused attention 0.53 /
0.46 on H100-class GPUs, torchtitan's FlexAttention 0.31 / 0.26 on H100 and 0.28 / 0.26 on
B200), where the GEMM figure had priced both directions: Qwen3-30B-A3B −13.1 → −9.2 % and
−12.6 → −8.8 %, torchtitan 16B H100 −14.3 → −8.4 %, B200 −18.5 → −14.4 %, without recompute
−25.1 → −21.2 %; Qwen3-235B at 16k −21.9 → −15.2 %, EP32 +24.3 → +26.6 %, pp32 +8.1 → +10.0 %;
DeepSeek-V3's report +82 → +86 % (held). Kept: eleven rows, median |error| 9.2 %, max 26.6 %.
torchtitan's block-causal (document) mask is costed as causal, an upper bound on its FLOPs: its
rows' data (unstated) may hold shorter documents, which would make their attention cheaper.

torch._grouped_mm on H100-class GPUs at torchao's measured share (0.40, its fwd+bwd
microbenchmark in pytorch/ao#2765, the method of B200's 0.35), where the dense 0.63 had been
taken: the torchtitan 16B H100 row −8.4 → +3.5 %; no other row moves (Megatron's experts are
Transformer Engine's per-expert GEMMs). The small-expert rows now −9.2, −8.8, +3.5, −14.4 and
−21.2 %: the Megatron pair and the B200 pair still on the fast side. Kept: median |error|
9.2 %, max 26.6 %. Megatron's cuDNN attention on GB200 at B200's derived 0.54 / 0.46 (it had
run at the GEMM figure): Qwen3-235B on GB200 +5.4 → +7.0 %, DeepSeek-V3's HybridEP run −1.1 →
+1.1 %.

A fifteenth row, the model zoo's Megatron-FSDP run (Qwen3-235B on 256 H100, TP2 EP8 DP128,
ZeRO-3 over the 128 data-parallel ranks across 16 nodes, full recompute, 17.6 s): +40.2 % as
first costed, 7.35 s of the FSDP collectives exposed in 40-M-parameter buckets. Megatron-FSDP
issues one coalesced gather and one reduce-scatter per TransformerLayer and kind (its local
experts another over the expert data-parallel group), whatever the bucket size (its
param_and_grad_buffer.py l.1860-1957 @ d98e8a64dd: the bucket size splits only parameters
outside the layers): 94 calls of 604 MB where 710 of 80 MB were priced, and the overlap's pieces
with them; +40.2 → +24.1 %.

The model zoo's launch lines for these Qwen3-235B runs (examples/qwen3/run_235b.sh l.30-40 @
31c5686: the EP32 and its 1F1B-overlap run, TP4 EP8, PP32, FSDP) all set
--moe-router-force-load-balancing, which the rows had not taken: with it (λ = 1 on the
exchange and the experts) EP32 +26.6 → +5.8 %, its overlapped run +2.8 → −11.1 %, PP32
+10.0 → +2.1 %, TP4 EP8 (held) −32.5 → −36.4 %, FSDP +24.1 → +19.9 %, now kept (twelve rows:
median |error| 9.0 %, max 21.2 %).

NCCL's all-to-all at its measured rate for its size inside the NVLink domain
(formulas.collectives.alltoall_busbw: nccl-tests alltoall_perf on ten 8× H100 nodes and on 8
GB300 over NVLink, each profile's W∞ and ramp time with its source), where the ring all-reduce's
bus bandwidth had priced it at every size (an 8× H100 node's all-to-all reaches 306 GB/s at a
256 MiB buffer, its ring 370): Qwen3-30B-A3B −9.2 → −6.1 % and −8.8 → −6.3 % (H800: H100's
curve in proportion, assumed), torchtitan 16B H100 +3.5 → +4.6 %, B200 −14.4 → −13.4 %,
without recompute −21.2 → −20.1 % (B200: GB300's curve, assumed), pp32 +2.1 → +4.0 %, the
GB200 all-to-all baseline (held) −41.3 → −39.9 %; DeepEP's rows do not move (its own kernels'
measured rates). Kept: median |error| 9.0 → 6.6 %, max 20.1 %.

MLA's attention as its kernels run it: the flash backward at (3·d_qk + 2·d_v)/(d_qk + d_v) = 2.6×
the forward's FLOPs (192/128; 2.5 had been taken), and torchtitan's FlexAttention on 256-wide
Q·Kᵀ (torch inductor rounds head widths to powers of two: 1.2× the forward's FLOPs, 1.23× the
backward's): torchtitan 16B H100 +4.6 → +7.2 %, B200 −13.4 → −11.6 %, without recompute −20.1 →
−18.3 %; DeepSeek-V3's HybridEP run +1.1 → +1.4 %. Kept: median |error| 7.1 %, max 18.3 %.

cuDNN's attention backward on H100-class GPUs at its measured causal time ratio (2.98–3.12×
the forward's at 8k–4k, cudnn-frontend's H200 benchmark: 0.43 of the peak where the non-causal
2.88× gave 0.46): Qwen3-30B-A3B −6.1 → −5.3 % and −6.3 → −5.4 %, Qwen3-235B at 16k −15.2 →
−14.0 %, EP32 +5.8 → +6.2 %, FSDP +19.9 → +20.0 %. Kept: median 7.1 %, max 20.0 %.

Megatron's 1F1B all-to-all overlap hides only the steady state's merged passes: the first
rank's 2(p − 1) + (v − 1)·p + 1 warm-up chunk forwards and as many cool-down backwards run alone
(schedules.py l. 964–970 @ d98e8a64dd), where (m − 1)/m of the exchange had been hidden. The
EP32 overlapped run (p 8, v 4, m 128: 39 of 512 chunks alone, 473/512 hidden, not 127/128)
−10.6 → −8.6 %; its gain over the plain run, 24.8 → 23.1 % (measured 10.7 %); no other row
runs the overlap. Kept: median |error| 7.1 %, max 20.0 %, unchanged."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from planner.catalog import load_hardware, load_model
from planner.model.estimate import estimate
from planner.schema import PlanConfig

REFERENCE = Path(__file__).parents[2] / "planner" / "reference"
DATA = json.loads((REFERENCE / "published_moe.json").read_text())
RUNS = {r["id"]: r for r in DATA["runs"]}
HELD_TO_DIRECTION = {"deepseek_v3_gb200_mxfp8_alltoall_baseline": -1,
                     "qwen3_235b_h100_deepep_tp4_ep8": -1,
                     "deepseek_v3_h800_report": +1}


def run_model(r: dict):
    """The row's model: a preset, or a model file under planner/reference/ (`model_file`), with
    the balancing the run used where the row states it (`balancing`)."""
    model = load_model(str(REFERENCE / r["model_file"]) if r.get("model_file") else r["model"])
    return model.model_copy(update={"balancing": r["balancing"]}) if r.get("balancing") else model


def run_config(r: dict) -> PlanConfig:
    """The run's layout and settings as a plan (module docstring: what is assumed)."""
    dp = r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
    mbs = r["mbs"] or 1
    return PlanConfig(
        dp=dp, tp=r["tp"], pp=r["pp"], cp=r["cp"], vpp=r["vpp"], mbs=mbs,
        n_micro=r["gbs"] // (dp * mbs), gbs=r["gbs"], seq_len=r["seq_len"],
        schedule="interleaved" if r["vpp"] > 1 else "1f1b", sequence_parallel=r["tp"] > 1,
        precision=r["precision"], fp8_recipe=r.get("fp8_recipe"), zero_stage=r.get("zero_stage", 1),
        grad_dtype=r.get("grad_dtype", "bf16"), framework=r.get("framework", "megatron"),
        recompute=r["recompute"] if r["recompute"] in ("none", "full") else "selective",
        ep=r["ep"], etp=r["etp"], moe_a2a_overlap=r["a2a_overlap"],
        moe_forced_balance=bool(r.get("forced_balance")), mtp=r.get("mtp", True),
        moe_capacity_factor=r.get("capacity_factor"),
        moe_permute_fusion=r.get("permute_fusion", True),
        torchtitan_flex_ac=r.get("torchtitan_flex_ac", False),  # torchtitan before v0.2.1
        moe_dispatcher={"hybridep": "deepep"}.get(r["dispatcher"], r["dispatcher"]))


def published_step_s(r: dict, plan) -> float:
    if r.get("step_s"):
        return r["step_s"]
    if r.get("tokens_per_s_per_gpu"):
        return r["gbs"] * r["seq_len"] / (r["tokens_per_s_per_gpu"] * r["gpus"])
    return plan.time.model_flops_causal / (r["tflops_per_gpu"] * 1e12 * r["gpus"])


@pytest.fixture(scope="module")
def errors() -> dict[str, float]:
    out = {}
    for rid, r in RUNS.items():
        plan = estimate(run_model(r), load_hardware(r["hw"]), run_config(r))
        out[rid] = plan.time.step_s / published_step_s(r, plan) - 1
    return out


def test_every_row_is_costed_and_sourced(errors):
    assert len(errors) == len(DATA["runs"]) == 15
    for r in DATA["runs"]:
        assert r["source"] and r["stated"] and r["assumed"], r["id"]
    assert {r["model"] for r in DATA["runs"]} == {"deepseek-v3", "qwen3-235b-a22b",
                                                  "qwen3-30b-a3b", "torchtitan-deepseek-v3-16b"}
    assert {r["hw"] for r in DATA["runs"]} == {"h100-nvlink", "h800-nvlink", "gb200-nvl72",
                                               "b200-nvlink"}
    assert {r.get("framework", "megatron") for r in DATA["runs"]} == {"megatron", "torchtitan"}


def test_flop_convention_matches_megatron():
    # rows with both: step 19.7 s at 245 TFLOPS on 256 GPUs = 1.2356e18 FLOPs per step; plan3d's
    # causal model FLOPs for the same step: 1.244e18 (0.7 %)
    for rid in ("qwen3_235b_h100_deepep_ep32", "qwen3_235b_h100_a2a_ep8_pp32"):
        r = RUNS[rid]
        plan = estimate(run_model(r), load_hardware(r["hw"]), run_config(r))
        megatron = r["step_s"] * r["tflops_per_gpu"] * 1e12 * r["gpus"]
        assert plan.time.model_flops_causal == pytest.approx(megatron, rel=0.01)


def test_published_moe_step_times_within_tolerance(errors):
    kept = {k: e for k, e in errors.items() if k not in HELD_TO_DIRECTION}
    assert statistics.median(abs(e) for e in kept.values()) <= 0.15, kept
    assert max(abs(e) for e in kept.values()) <= 0.30, kept


def test_the_held_rows_stay_on_their_side(errors):
    for rid, sign in HELD_TO_DIRECTION.items():
        assert errors[rid] * sign > 0, (rid, errors[rid])


def test_overlap_and_deepep_move_the_right_way(errors):
    # the same job with Megatron's 1F1B a2a overlap ran 10.7 % faster (19.7 → 17.6 s); the model
    # must make it faster too, by between a third and three times that
    plain, overlapped = (RUNS[k] for k in ("qwen3_235b_h100_deepep_ep32",
                                           "qwen3_235b_h100_deepep_ep32_overlap"))
    hw, model = load_hardware(plain["hw"]), load_model(plain["model"])
    a = estimate(model, hw, run_config(plain)).time.step_s
    b = estimate(model, hw, run_config(overlapped)).time.step_s
    measured = 1 - overlapped["step_s"] / plain["step_s"]
    assert measured / 3 < 1 - b / a < 3 * measured
    # DeepEP sends fewer network copies than NCCL's all-to-all across nodes
    nccl = estimate(model, hw, run_config(dict(plain, dispatcher="alltoall"))).time.step_s
    assert a < nccl
