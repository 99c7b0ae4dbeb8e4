"""Megatron runs classic (unfused) attention only without context parallelism: Transformer
Engine turns its unfused backend off under CP (get_attention_backend, pytorch/attention/
dot_product_attention/utils.py @ d0067d0), and --attention-backend unfused leaves no other on.
DeepSpeed's Ulysses wraps whatever attention the model runs."""

from __future__ import annotations

import pytest

from planner.catalog import load_hardware, load_model
from planner.errors import PlanError
from planner.formulas.choices import Attention
from planner.model.estimate import estimate
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.request import PlanRequest

MODEL = load_model("8b")
H100 = load_hardware("h100-nvlink")


def _config(framework: str, cp: int) -> PlanConfig:
    return PlanConfig(dp=8 // cp, cp=cp, n_micro=cp, gbs=8, seq_len=8192, zero_stage=1,
                      sequence_parallel=False,
                      attention=Attention.CLASSIC, framework=framework)


def test_megatron_refuses_classic_attention_with_cp():
    with pytest.raises(PlanError, match=r"classic attention .* context parallelism \(cp=2\)"):
        estimate(MODEL, H100, _config("megatron", 2))
    assert estimate(MODEL, H100, _config("megatron", 1)).time.step_s > 0
    # DeepSpeed's Ulysses (its a2a kind) runs it
    assert estimate(MODEL, H100, _config("deepspeed", 2)).time.step_s > 0


def test_the_search_offers_no_classic_cp_layout_under_megatron():
    req = PlanRequest(gpus=8, attention=Attention.CLASSIC, gbs=64, seq_len=8192)
    plans = search(MODEL, H100, req, top=50).plans
    assert plans and all(p.config.cp == 1 for p in plans)
    # with flash attention the same search ranks context-parallel layouts
    flash = search(MODEL, H100, req.model_copy(update={"attention": Attention.FLASH}),
                   top=50).plans
    assert any(p.config.cp > 1 for p in flash)
