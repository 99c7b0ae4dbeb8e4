"""Mutation checks: the suite's own checks catch deliberate errors in the central formulas.

For each mutant, the formula module's source is read, one textual change is applied, and the
result is executed into a fresh module object (never into sys.modules, never written to disk:
the real modules are untouched, which the last test verifies). The same `check_*` functions that
test_formulas_hand.py runs on the real modules are then run on the mutant, and at least one must
fail. An unmutated copy built the same way must pass them all (the harness itself breaks nothing).

If a mutant's original text disappears from the source (the formula was rewritten), its test
fails with "no longer applies": update the mutant to the new text.
"""

from __future__ import annotations

import importlib.util
import inspect
import types
from pathlib import Path

import pytest

from planner.formulas import activations, comm, flops, memory, params, pipeline

try:  # tests/ as a package
    from . import test_formulas_hand as hand
except ImportError:  # tests/ on sys.path (pytest's default rootdir-relative import)
    import test_formulas_hand as hand

CHECKS = {
    "planner.formulas.pipeline": (hand.check_bubble, hand.check_inflight),
    "planner.formulas.comm": (hand.check_ring, hand.check_tp_pp_volume, hand.check_dp_volume,
                              hand.check_links),
    "planner.formulas.memory": (hand.check_zero_table1,),
    "planner.formulas.activations": (hand.check_korthikanti_table2,),
    "planner.formulas.params": (hand.check_param_counts, hand.check_padded_vocab),
    "planner.formulas.flops": (hand.check_flop_forms,),
}

MUTANTS = [
    # --- pipeline.bubble_fraction / in-flight ---------------------------------------------
    ("pipeline", "return (pp - 1) / (vpp * n_micro + pp - 1)",
     "return (pp) / (vpp * n_micro + pp - 1)", "bubble: p − 1 → p"),
    ("pipeline", "return (pp - 1) / (vpp * n_micro + pp - 1)",
     "return (pp - 1) / (n_micro + pp - 1)", "bubble: interleaving ignored"),
    ("pipeline", "return (pp - 1) / (vpp * n_micro + pp - 1)",
     "return (pp - 1) / (vpp * n_micro)", "bubble: over ideal time, not over the step"),
    ("pipeline", "return (pp - 1) / (vpp * n_micro + pp - 1)",
     "return (pp - 1) / (vpp * n_micro + pp)", "bubble: step one slot too long"),
    ("pipeline", "return _ops.minimum(pp, n_micro)", "return _ops.minimum(pp - 1, n_micro)",
     "1F1B first stage holds p − 1"),
    # --- comm.ring_allreduce_bytes and friends --------------------------------------------
    ("comm", "return 2 * (n_ranks - 1) / n_ranks * buffer_bytes",
     "return (n_ranks - 1) / n_ranks * buffer_bytes", "all-reduce: factor 2 lost"),
    ("comm", "return 2 * (n_ranks - 1) / n_ranks * buffer_bytes",
     "return 2 * (n_ranks - 1) * buffer_bytes", "all-reduce: /n lost"),
    ("comm", "return 2 * (n_ranks - 1) / n_ranks * buffer_bytes",
     "return 2 * buffer_bytes", "all-reduce: (n − 1)/n lost"),
    ("comm", '3: ((Collective.ALL_GATHER, "weight", When.MICRO_BATCH),\n'
     '        (Collective.ALL_GATHER, "weight", When.MICRO_BATCH),',
     '3: ((Collective.ALL_GATHER, "weight", When.MICRO_BATCH),',
     "ZeRO-3 gathers weights once, not twice"),
    ("comm", "return 2 * ring_allreduce_bytes(tp,", "return ring_allreduce_bytes(tp,",
     "TP: one all-reduce per layer instead of two"),
    # --- comm: the link model (issue 12) ---------------------------------------------------
    ("comm", "ranks_in_domain * nics_per_gpu * nic_busbw / oversubscription",
     "nics_per_gpu * nic_busbw / oversubscription", "a cross-node group gets one NIC"),
    ("comm", "+ _ops.log2(n_domains) * net_latency_s)", "+ (n_domains - 1) * net_latency_s)",
     "tree latency linear in the nodes"),
    ("comm", "(n_ranks - n_domains) * fast_latency_s + (n_domains - 1) * net_latency_s",
     "(n_ranks - 1) * net_latency_s", "every ring step at the network's latency"),
    ("comm", "_ops.minimum(domain_gpus / stride, group_size / 2)",
     "_ops.minimum(domain_gpus, group_size / 2)", "ranks per domain ignore the stride"),
    ("comm", "return (own_bytes + 1 - sends) / (own_bytes + sends * concurrent_bytes + 1 - sends)",
     "return 1", "links never shared"),
    # --- memory.optimizer_bytes / ZERO_SHARDS ---------------------------------------------
    ("memory", "1: (False, False, True)", "1: (False, False, False)",
     "ZeRO-1 shards nothing"),
    ("memory", "2: (False, True, True)", "2: (False, False, True)",
     "ZeRO-2 leaves gradients whole"),
    ("memory", "3: (True, True, True)", "3: (False, True, True)",
     "ZeRO-3 leaves weights whole"),
    ("memory", "(bytes_per_master + bytes_per_moments) * params", "bytes_per_moments * params",
     "K = 8: master copy forgotten"),
    ("memory", "ZERO_SHARDS[zero_stage][0]", "ZERO_SHARDS[zero_stage][1]",
     "weights follow the gradients' sharding"),
    # --- activations.layer_activation_bytes ------------------------------------------------
    ("activations", "MASK_BYTES = 1", "MASK_BYTES = 2", "dropout masks 2 bytes"),
    ("activations", "(4 * act_bytes + 2 * MASK_BYTES * dropout)",
     "(4 * act_bytes + MASK_BYTES * dropout)", "one dropout mask outside TP instead of two"),
    ("activations", "head_dim * (2 * n_heads + 2 * n_kv_heads)",
     "head_dim * (2 * n_heads + n_kv_heads)", "V not stored"),
    ("activations", "(act_bytes + dropout * (MASK_BYTES + act_bytes))",
     "(act_bytes + dropout * MASK_BYTES)", "attention-dropout output not stored: 3as²b"),
    ("activations", "return act_bytes * s * mbs * hidden / sp_divisor",
     "return act_bytes * s * mbs * hidden", "full recompute ignores sequence parallelism"),
    ("activations", "score_activation_bytes(s, mbs, n_heads, dropout, attention, act_bytes) / tp",
     "score_activation_bytes(s, mbs, n_heads, dropout, attention, act_bytes)",
     "score matrix not split by TP"),
    ("activations", "kept = (replicated / sp_divisor", "kept = (replicated / tp",
     "norm/dropout inputs split by TP without sequence parallelism"),
    ("activations", "if recompute is Recompute.SELECTIVE:", "if recompute is Recompute.NONE:",
     "selective and none swapped"),
    # --- params.padded_vocab and the counts -----------------------------------------------
    ("params", "def padded_vocab(vocab, tp, multiple=128):",
     "def padded_vocab(vocab, tp, multiple=64):", "pad to 64 instead of 128"),
    ("params", "_ops.ceil(vocab / (multiple * tp)) * multiple * tp",
     "_ops.ceil(vocab / multiple) * multiple * tp", "pad to 128, then multiply by t"),
    ("params", "_ops.ceil(vocab / (multiple * tp)) * multiple * tp",
     "(vocab / (multiple * tp)) * multiple * tp", "no rounding up"),
    ("params", "_ops.ceil(vocab / (multiple * tp)) * multiple * tp",
     "_ops.ceil(vocab / (multiple * tp)) * multiple", "pad to 128·t, keep 1/t of it"),
    ("params", "return 2 * norm_width * hidden", "return norm_width * hidden",
     "one norm per layer"),
    ("params", "return hidden * head_dim * (2 * n_heads + 2 * n_kv_heads)",
     "return hidden * head_dim * (2 * n_heads + n_kv_heads)", "attention without V"),
    # --- flops --------------------------------------------------------------------------------
    ("flops", "return 96 * gbs", "return 72 * gbs", "Narayanan's 96 → 72"),
    ("flops", "vocab / (16 * n_layers * hidden)", "vocab / (12 * n_layers * hidden)",
     "Narayanan's V/16lh → V/12lh"),
]


def build(module_name: str, old: str | None = None, new: str | None = None) -> types.ModuleType:
    """A fresh module object from the module's source, with `old` replaced by `new` once."""
    spec = importlib.util.find_spec(module_name)
    source = Path(spec.origin).read_text(encoding="utf-8")
    if old is not None:
        count = source.count(old)
        assert count >= 1, f"mutant no longer applies to {module_name}: {old!r} not in source"
        assert count == 1, f"mutant is ambiguous in {module_name}: {old!r} occurs {count}×"
        source = source.replace(old, new)
    module = types.ModuleType(f"{module_name}__mutant")
    module.__package__ = module_name.rpartition(".")[0]  # so `from . import _ops` resolves
    module.__file__ = f"<mutant of {module_name}>"
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def caught(module_name: str, module: types.ModuleType) -> list[str]:
    """The names of the checks that fail on `module`."""
    failed = []
    for check in CHECKS[module_name]:
        try:
            check(module)
        except (AssertionError, ArithmeticError):
            failed.append(check.__name__)
    return failed


@pytest.mark.parametrize("module_name", sorted(CHECKS))
def test_unmutated_copy_passes_every_check(module_name):
    assert caught(module_name, build(module_name)) == []


@pytest.mark.parametrize("short,old,new,what", MUTANTS, ids=[m[3] for m in MUTANTS])
def test_mutant_is_killed(short, old, new, what):
    module_name = f"planner.formulas.{short}"
    killers = caught(module_name, build(module_name, old, new))
    assert killers, f"mutant survived: {what} ({old!r} → {new!r})"


def test_every_central_formula_has_mutants():
    targets = {m[0] for m in MUTANTS}
    assert {"pipeline", "comm", "memory", "activations", "params"} <= targets
    assert len(MUTANTS) >= 25


def test_real_modules_are_untouched():
    """Mutants live in their own module objects: the real ones still pass and still hold the
    original text."""
    for module in (pipeline, comm, memory, activations, params, flops):
        assert caught(module.__name__, module) == []
        assert "__mutant" not in module.__name__
    assert "(pp - 1) / (vpp * n_micro + pp - 1)" in inspect.getsource(pipeline.bubble_fraction)
    assert memory.ZERO_SHARDS[3] == (True, True, True)
