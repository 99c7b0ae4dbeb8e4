"""Layout strings as the tables print them, read back (planner.layout_text)."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.layout_text import merge_layout, parse_layout
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.request import PlanRequest


def test_the_issues_row_by_hand():
    assert parse_layout("dp128 tp2 pp1 cp2 z3 sel") == dict(
        dp=128, tp=2, pp=1, cp=2, vpp=1, mbs=1, zero="3", recompute="selective", sp=True)
    # the long spelling (reasons, --json) reads the same: no `sp` there means none
    assert parse_layout("dp16 tp2 pp4 cp4 v6 mbs1 z1 none") == dict(
        dp=16, tp=2, pp=4, cp=4, vpp=6, mbs=1, zero="1", recompute="none", sp=False,
        schedule="interleaved")
    assert parse_layout("dp32 tp1 pp1 cp16h8 mbs4 z3 sel")["cp_kind"] == "hierarchical"
    assert parse_layout("dp8 tp8 pp2 cp4a2a zbv z1 full nosp offp offa2") == dict(
        dp=8, tp=8, pp=2, cp=4, cp_kind="a2a", vpp=1, schedule="zbv", mbs=1, zero="1",
        recompute="full", sp=False, offload_params=True, offload_activations=2)


def test_recompute_levels_recipes_and_dispatchers_read_back():
    got = parse_layout("dp256 tp1 pp1 cp2 z3 full28")
    assert (got["recompute"], got["recompute_layers"]) == ("full", 28)
    assert parse_layout("dp8 tp8 pp1 z1 sel+mlp")["recompute_modules"] == "core_attn,mlp"
    got = parse_layout("dp8 tp8 pp1 z1 sel mxfp8-pg")
    assert (got["precision"], got["fp8_recipe"], got["fp8_param_gather"]) == ("fp8", "mxfp8",
                                                                              True)
    assert parse_layout("dp32 tp4 pp16 v3 ep16 deepep z1")["moe_dispatcher"] == "deepep"
    # fit: checkpoints split over the tp ranks (DeepSpeed partition_activations), on any full level
    got = parse_layout("dp8 tp2 pp1 cp2 mbs4 z3 full+dist nosp")
    assert (got["recompute"], got["distribute_saved_activations"], got["sp"]) == ("full", True,
                                                                                  False)
    got = parse_layout("dp8 tp8 pp4 z1 full2+dist nosp")
    assert (got["recompute_layers"], got["distribute_saved_activations"]) == (2, True)
    config = PlanConfig(dp=8, tp=2, pp=1, cp=2, mbs=4, n_micro=1, gbs=32, seq_len=8192,
                        zero_stage=3, recompute="full", sequence_parallel=False,
                        distribute_saved_activations=True)
    assert config.short_label() == "dp8 tp2 pp1 cp2 mbs4 z3 full+dist nosp"
    assert parse_layout(config.label(batch=False))["distribute_saved_activations"]


def config_fields(c: PlanConfig) -> dict:
    return dict(dp=c.dp, tp=c.tp, pp=c.pp, cp=c.cp, vpp=c.vpp, mbs=c.mbs,
                zero=str(int(c.zero_stage)), recompute=c.recompute.value,
                sp=c.sequence_parallel if c.tp > 1 else False)


@pytest.mark.parametrize(("model", "gpus", "hw"), [("70b", 512, "h100-nvlink"),
                                                   ("8b", 8, "h100-nvlink"),
                                                   ("70b", 64, "b200-nvlink")])
def test_every_row_of_a_table_reads_back_to_its_plan(model, gpus, hw):
    plans = search(load_model(model), load_hardware(hw), PlanRequest(gpus=gpus), top=10).plans
    for p in plans:
        for text in (p.config.short_label(), p.config.label(batch=False)):
            got = parse_layout(text)
            got["sp"] = got["sp"] if got["tp"] > 1 else False
            assert {k: got[k] for k in config_fields(p.config)} == config_fields(p.config), text


def test_a_string_that_contradicts_a_flag_names_both():
    with pytest.raises(PlanError, match=r"--plan 'dp128 tp2 pp1 cp2 z3 sel' says zero 3 but "
                                        r"--zero 1 was given: leave one of them out"):
        merge_layout("dp128 tp2 pp1 cp2 z3 sel", {"zero": "1", "tp": None})
    with pytest.raises(PlanError, match=r"says sp on but --sp/--no-sp off"):
        merge_layout("dp128 tp2 pp1 cp2 z3 sel", {"sp": False})
    # agreeing flags, and flags the string does not speak of, are kept
    assert merge_layout("dp128 tp2 pp1 cp2 z3 sel", {"tp": 2, "gbs": 512})["gbs"] == 512


@pytest.mark.parametrize(("text", "expected"), [
    ("", "empty layout"), ("tp8 pp2 z1", "leaves out dp"), ("dp8 tp8 pp1", "ZeRO stage"),
    ("dp8 tp8 pp1 z1 turbo", "'turbo' is not part of a layout"),
    ("dp8 tp8 pp1 z1 sel full", "'full' repeats a setting"),
    # the stage named as the string spells it (it read "--zero: '9' is not one of …", a flag the
    # user never gave)
    ("dp8 tp8 pp1 z9", r"^--plan 'dp8 tp8 pp1 z9': 'z9': the ZeRO stage is z0, z1, z2 or z3$"),
])
def test_bad_strings_say_what_is_wrong(text, expected):
    with pytest.raises(PlanError, match=expected):
        parse_layout(text)
