"""One micro-batch on the fullest stage, per GPU: its compute (layers and the LM head), the
exposed TP, CP and PP time, and the split-backward schedules' F and W (formulas/timing.py)."""

from __future__ import annotations

from types import SimpleNamespace

from ..formulas import flops as F
from ..formulas import moe_mtp as MTP
from ..formulas import timing as T
from .activations import checkpoint_gather_mb_s
from .collectives import pipeline_sends_s
from .numbers import Choices, same


def microbatch_times(x, c: Choices, k: SimpleNamespace, note=same) -> SimpleNamespace:
    """The stage's times per micro-batch that the schedule and the overlaps read."""
    s, b, h, t, cp, layers = k.s, k.b, k.h, k.t, k.cp, k.layers
    head_s = note("head_s", T.head_time_s(F.head_flops(s, b, k.vocab_padded, h) / (t * cp),
                                          k.logits_act, x.peak_flops_16, x.gemm_eff_16, x.hbm_bw,
                                          x.hbm_eff))
    pp_mb_s = pipeline_sends_s(x, k, note)  # each send/recv as NCCL runs it
    layer_s = k.fwd_s + k.bwd_s + k.recompute_s + k.quant_s
    # moe: the multi-token-prediction modules on the last stage, which the stage time takes as
    # the fullest (as it does the head): their layers are in the stage's layer slots; eh_proj
    # and one more head pass each
    mtp_s = (note("mtp_s", MTP.mtp_time_s(k.mtp_depth, 3 * T.compute_time_s(
        MTP.eh_proj_flops(b * s / cp, h) / t, x.peak_flops, x.gemm_eff), head_s))
        if k.moe_model else 0)
    compute_mb_s = note("compute_microbatch_s", layers * layer_s + head_s + mtp_s)
    return SimpleNamespace(
        pp_mb_s=pp_mb_s, compute_mb_s=compute_mb_s,
        # fit: the distributed checkpoints' all-gathers run on the TP group, exposed
        tp_mb_s=layers * k.tp_layer_exposed + checkpoint_gather_mb_s(x, c, k, note),
        cp_mb_s=layers * k.cp_layer_exposed,
        # the split-backward schedules' W (Qi et al. 2024 §2): the weight-gradient GEMMs, which
        # run the forward matmuls' FLOPs; F is the forward with its TP all-reduces, B the rest of
        # the stage
        wgrad_mb_s=note("wgrad_microbatch_s", layers * k.mm_s),
        fwd_mb_s=note("forward_microbatch_s", layers * k.layer_fwd_total))
