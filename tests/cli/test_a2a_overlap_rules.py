"""Megatron's all-to-all overlap (--moe-a2a-overlap, Megatron --overlap-moe-expert-parallel-comm)
beside the settings Megatron-Core refuses with it: search offers no overlapped row where the
request asks for one of them, --emit never writes the pair, explain refuses it in one line that
names both and what to give instead. Megatron's words are TransformerConfig.__post_init__'s
(megatron/core/transformer/transformer_config.py @ d98e8a64dd); tests/parsers checks them
against Megatron-Core itself."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()

SHARED_SAID = "disable moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm"
"""transformer_config.py l.3038-3041 @ d98e8a64dd."""
RECOMPUTE_SAID = "disable moe in recompute_modules when enabling overlap_moe_expert_parallel_comm"
"""transformer_config.py l.3030-3032 @ d98e8a64dd."""


def _search(*argv: str) -> dict:
    r = runner.invoke(app, ["search", *argv, "--json", "--top", "200"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_search_with_shared_expert_overlap_offers_no_overlapped_row():
    # the fresh-user review's command: row 1 was `dp16 tp8 pp2 v4 ep128 ovl z1`, emitted with
    # both --overlap-moe-expert-parallel-comm and --moe-shared-expert-overlap
    data = _search("--model", "deepseek-v3", "--gpus", "256", "--moe-shared-expert-overlap",
                   "--emit", "megatron")
    configs = [row["config"] for row in data["plans"]]
    assert configs and all(c["moe_shared_expert_overlap"] for c in configs)
    assert not any(c["moe_a2a_overlap"] for c in configs)
    text = data["launch"]["text"]
    assert "--moe-shared-expert-overlap" in text
    assert "--overlap-moe-expert-parallel-comm" not in text
    # without the shared-expert overlap the same search does overlap (the rule is what moved)
    plain = _search("--model", "deepseek-v3", "--gpus", "256")
    assert any(row["config"]["moe_a2a_overlap"] for row in plain["plans"])


def test_search_overlaps_only_where_moe_is_not_recomputed():
    # the review's second command put `ovl` on row 1 beside --recompute-modules moe; with
    # selective and none both weighed, only the rows that recompute nothing overlap
    data = _search("--model", "qwen3-30b-a3b", "--gpus", "64", "--recompute", "selective,none",
                   "--recompute-modules", "moe")
    kinds = {(row["config"]["recompute"], row["config"]["moe_a2a_overlap"])
             for row in data["plans"]}
    assert ("none", True) in kinds
    assert ("selective", True) not in kinds
    only = _search("--model", "qwen3-30b-a3b", "--gpus", "64", "--recompute", "selective",
                   "--recompute-modules", "moe", "--emit", "megatron")
    assert only["plans"] and not any(row["config"]["moe_a2a_overlap"] for row in only["plans"])
    # moe_act recomputes the experts' activation alone, which the overlap allows
    act = _search("--model", "qwen3-30b-a3b", "--gpus", "64", "--recompute", "selective",
                  "--recompute-modules", "moe_act")
    assert any(row["config"]["moe_a2a_overlap"] for row in act["plans"])


EXPLAIN = ["explain", "--model", "deepseek-v3", "--gpus", "256", "--hw", "h100-nvlink",
           "--plan", "dp16 tp8 pp2 v4 ep128 ovl z1", "--gbs", "1024"]


def test_explain_refuses_the_overlap_with_shared_expert_overlap_in_one_line():
    r = runner.invoke(app, [*EXPLAIN, "--moe-shared-expert-overlap"])
    assert r.exit_code == 2
    assert r.stderr == (
        "plan3d: error: megatron: --moe-a2a-overlap (--overlap-moe-expert-parallel-comm) does "
        f"not run with --moe-shared-expert-overlap: Megatron-Core asserts \"{SHARED_SAID}\"; "
        "keep one: --no-moe-a2a-overlap, or leave --moe-shared-expert-overlap out\n")


def test_explain_refuses_the_overlap_with_moe_recomputed_in_one_line():
    r = runner.invoke(app, ["explain", "--model", "deepseek-v3", "--gpus", "256", "--tp", "8",
                            "--pp", "2", "--vpp", "4", "--schedule", "interleaved", "--ep", "128",
                            "--zero", "1", "--gbs", "1024", "--moe-a2a-overlap", "--recompute",
                            "selective", "--recompute-modules", "core_attn,moe"])
    assert r.exit_code == 2
    assert r.stderr == (
        "plan3d: error: megatron: --moe-a2a-overlap (--overlap-moe-expert-parallel-comm) does "
        f"not run with moe in --recompute-modules: Megatron-Core asserts \"{RECOMPUTE_SAID}\"; "
        "drop moe from --recompute-modules (moe_act still recomputes the experts' activation), "
        "or give --no-moe-a2a-overlap\n")


def test_search_asked_for_both_says_why_first():
    # both given to search: the framework's refusal of the pair, alone (diagnosis
    # moe_settings_refusal), not a count of removed layouts
    r = runner.invoke(app, ["search", "--model", "deepseek-v3", "--gpus", "256",
                            "--moe-a2a-overlap", "--moe-shared-expert-overlap"])
    assert r.exit_code == 2
    assert SHARED_SAID in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_overlap_trains_at_most_one_mtp_layer():
    # transformer_config.py l.3042-3046 @ d98e8a64dd: mtp_num_layers in (None, 0, 1) under the
    # overlap; DeepSeek-V3's one module runs, a model with two does not unless --no-mtp
    from planner.catalog import load_hardware, load_model
    from planner.errors import PlanError
    from planner.model.estimate import check_config
    from planner.schema import PlanConfig

    plan = dict(dp=64, tp=1, pp=8, vpp=2, ep=64, mbs=1, n_micro=16, gbs=1024, seq_len=4096,
                zero_stage=1, recompute="selective", sequence_parallel=False,
                schedule="interleaved", moe_a2a_overlap=True)
    hw, dsv3 = load_hardware("h100-nvlink"), load_model("deepseek-v3")
    two = dsv3.model_copy(update={"mtp_layers": 2})
    check_config(dsv3, hw, PlanConfig(**plan))
    check_config(two, hw, PlanConfig(**plan, mtp=False))
    check_config(two, hw, PlanConfig(**{**plan, "moe_a2a_overlap": False}))
    with pytest.raises(PlanError, match="MTP supports at most one layer when enabling "
                       "overlap_moe_expert_parallel_comm.*give --no-mtp, or --no-moe-a2a-"):
        check_config(two, hw, PlanConfig(**plan))
