"""DeepSpeed ZeRO-3's parameter fetches as its coordinator issues them: how many coalesced
all-gathers a micro-batch's parameter trace takes, which parameters the backward gathers again,
and the first fetch that nothing hides.

Source: deepspeedai/DeepSpeed @ edaa72212, deepspeed/runtime/zero/
  partitioned_param_coordinator.py — fetch_sub_module (l.310-490): at each submodule's pre-forward
    (and pre-backward) hook it gathers the module's own parameters if they are not in flight
    (l.364-382), then pops the recorded trace of the whole forward + backward (reset_step,
    l.283) and gathers, in ONE call of __all_gather_params, parameters not yet available until
    min(stage3_max_live_parameters − live, stage3_prefetch_bucket_size) elements are reached
    (l.451-485; whole parameters, so a set reaches at least one parameter); `live` (l.593, 630)
    counts every gathered, not yet released parameter, and is reset at each forward's start;
    __params_to_release (l.634-664) keeps a parameter the prefetcher skipped because still live,
    and one its trace reuses within stage3_max_reuse_distance elements;
  partition_parameters.py — all_gather_coalesced → _all_gather_dtype (l.1301-1343, 1418-1440):
    one all_gather_into_tensor per dtype of the set (one for a bf16 model);
  parameter_offload.py — mark_persistent_parameters (l.311-328): parameters of at most
    stage3_param_persistence_threshold elements stay whole on every rank and are never gathered
    (norm weights, biases below 10⁵ elements: the linear weights are what is gathered);
    _start_of_forward_hook (l.296-302): reset_step at each forward, so each micro-batch starts
    with nothing live and its first fetch waits;
  config.py l.215-248: prefetch bucket 5·10⁷, persistence threshold 10⁵, max live 10⁹, max
    reuse distance 10⁹ elements (the defaults).
"""

from __future__ import annotations

from . import _ops


def prefetch_gather_calls(trace_elements, module_elements, prefetch_bucket, max_live):
    """The coalesced all-gathers ZeRO-3 issues to fetch the first E elements of a micro-batch's
    parameter trace:

        n(E) = ⌈min(E, L)/max(B, s)⌉ + ⌈max(0, E − L)/s⌉

    While fewer than L (stage3_max_live_parameters) elements are live, each hook's prefetch
    gathers one set of max(B, s) elements (B = stage3_prefetch_bucket_size; a module of s ≥ B
    elements is one set of its own): the first L elements take ⌈min(E, L)/max(B, s)⌉ calls.
    Once L are live, a hook may fetch only what the modules before it released, and each module
    releases its s elements after its forward (or backward): one gather per module for the
    rest. E = 0 gives 0.

    Assumptions: modules of equal size s (the stage's gathered elements over its modules);
    the trace from the micro-batch's start (live reset by reset_step); the one-parameter
    overshoot of a set ignored. Source: partitioned_param_coordinator.py @ edaa72212
    l.451-485 (the prefetch loop), l.593 and 630 (live counted up and down)."""
    ramp = _ops.ceil(_ops.minimum(trace_elements, max_live)
                     / _ops.maximum(prefetch_bucket, module_elements))
    return ramp + _ops.ceil(_ops.maximum(0, trace_elements - max_live) / module_elements)


def backward_gathered_elements(gathered_elements, max_live, reuse_distance):
    """The elements the backward gathers again, of the Ψ the forward gathered:

        Ψ_b = max(0, Ψ − max(L, R/2))

    Two rules keep a parameter gathered from its forward use to its backward one, and the
    forward's last max(L, R/2) elements are kept by one or the other:
    - the prefetcher's: it walks the trace at most L (stage3_max_live_parameters) newly gathered
      elements ahead, and pops an entry whose parameter is still live without counting it,
      marking the parameter as needed at that later step (l.465-472), so __params_to_release
      spares it (l.649-651). Once it has fetched the forward's last L elements it turns into the
      backward's entries, which visit those same parameters first (the backward runs the
      layers in reverse): all live, all kept;
    - the reuse distance: a parameter the forward used r elements before its end is used again
      about 2r elements later in the trace (3r under full recompute, whose rerun forward counts
      too) and is kept when that is within R (stage3_max_reuse_distance, l.653-662): r ≤ R/2.
    At the defaults (L = R = 10⁹) the prefetcher's L decides. Assumes the backward visits the
    modules in the reverse order of the forward (full recompute gathers a layer once for its
    rerun forward and backward together, a layer apart). Source:
    partitioned_param_coordinator.py @ edaa72212."""
    return _ops.maximum(0, gathered_elements - _ops.maximum(max_live, reuse_distance / 2))


def first_fetch_elements(first_param_elements, prefetch_bucket):
    """The set the forward's first fetch waits for, max(B, e): at the top module's pre-forward
    hook nothing is live (reset_step) and the prefetch pops the trace's first parameters, the
    word embedding's e = V·h/t first (the model's first module), up to the bucket B; the
    embedding module's hook then waits for them with no compute before it. Source:
    partitioned_param_coordinator.py @ edaa72212 l.283-287, 451-485."""
    return _ops.maximum(prefetch_bucket, first_param_elements)
