"""`--emit megatron` through Megatron-LM's own `parse_args` + `validate_args` and
`core_transformer_config_from_args`, where a Megatron-LM checkout is named by the environment
variable MEGATRON_LM_DIR (Megatron-LM is not on the package index; skipped otherwise, saying
so). MEGATRON_LM_PYTHON names the interpreter to run it with (default: this one); Megatron-LM
@ d98e8a64dd needs Python ≥ 3.12 (typing.override), torch and megatron-core's dependencies.

Each row runs megatron_lm_runner.py in a subprocess (PYTHONPATH = the checkout; its stubs are
listed in its docstring) and compares what Megatron derived with the plan (`--json`): the
data-parallel size, micro-batches, virtual stages, the parallel sizes, the padded vocabulary;
and the TransformerConfig it builds with plan3d's model (and the Hugging Face config where the
repository holds one) field by field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import emitted, hf_config, model_of, overlap_case, plan_json
from .matrix import ROWS

CHECKOUT = os.environ.get("MEGATRON_LM_DIR")
if not CHECKOUT or not (Path(CHECKOUT) / "megatron" / "training" / "arguments.py").is_file():
    pytest.skip("MEGATRON_LM_DIR does not name a Megatron-LM checkout (its parse_args and "
                "validate_args are not on the package index)", allow_module_level=True)

PYTHON = os.environ.get("MEGATRON_LM_PYTHON", sys.executable)
RUNNER = Path(__file__).with_name("megatron_lm_runner.py")
MEGATRON_ROWS = [(rid, args) for rid, args, fmts in ROWS if "megatron" in fmts]


def megatron_lm(args: str, tmp_path) -> dict:
    from planner.catalog import load_model

    c = plan_json(args)["config"]
    path = tmp_path / "args.txt"
    path.write_text(emitted(args, "megatron"))
    world = c["dp"] * c["tp"] * c["pp"] * c["cp"]
    vocab = load_model(model_of(args)).vocab
    env = dict(os.environ, PYTHONPATH=CHECKOUT)
    out = subprocess.run([PYTHON, str(RUNNER), str(path), str(world), str(vocab)],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("PLAN3D-JSON ")]
    assert lines, f"Megatron-LM refused the arguments:\n{out.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("PLAN3D-JSON "))


@pytest.mark.parametrize("rid,args", MEGATRON_ROWS, ids=[r for r, _ in MEGATRON_ROWS])
def test_megatron_lm_parses_and_derives_the_plan(rid, args, tmp_path):
    from planner.catalog import load_model

    plan = plan_json(args)
    c = plan["config"]
    got = megatron_lm(args, tmp_path)
    assert got["data_parallel_size"] == c["dp"]
    assert got["global_batch_size"] // (got["micro_batch_size"] * got["data_parallel_size"]) \
        == c["n_micro"]
    assert (got["tensor_model_parallel_size"], got["pipeline_model_parallel_size"],
            got["context_parallel_size"]) == (c["tp"], c["pp"], c["cp"])
    vpp = got["virtual_pipeline_model_parallel_size"] or 1
    assert vpp == c["vpp"]
    if got["num_moe_experts"]:
        assert (got["expert_model_parallel_size"], got["expert_tensor_parallel_size"]) == (
            c["ep"], c["etp"])
    m = load_model(model_of(args))
    # Megatron pads the vocabulary to a multiple of 128·tp (build_tokenizer.py)
    assert got["padded_vocab_size"] == -(-m.vocab // (128 * c["tp"])) * 128 * c["tp"]
    assert (got["num_layers"], got["hidden_size"], got["num_attention_heads"]) == (
        m.n_layers, m.hidden, m.n_heads)
    # --qk-layernorm: Qwen3's per-head norms, or MLA's latent norms (Megatron builds them only
    # under it: test_megatron_core.test_mla_latent_norms_built)
    assert got["layernorm_epsilon"] == m.norm_eps
    assert got["qk_layernorm"] == (m.qk_norm or m.is_mla)
    assert got["rotary_base"] == int(m.rope_theta or 10000)
    assert got["use_rope_scaling"] == (m.rope_scaling == "llama3")
    if m.rope_scaling == "llama3":
        assert got["rope_scaling_factor"] == m.rope_factor
    assert got["untie"] == (not m.tied_embeddings)
    assert (got["mtp_num_layers"] or 0) == m.mtp_layers
    hf = hf_config(m.name)
    if hf is not None:
        assert got["layernorm_epsilon"] == hf["rms_norm_eps"]
        assert got["rotary_base"] == int(hf["rope_theta"])
        assert (got["moe_router_topk_scaling_factor"] or 1.0) == hf.get("routed_scaling_factor",
                                                                        1.0)
        assert got["moe_router_enable_expert_bias"] == (hf.get("topk_method") == "noaux_tc")
        if hf.get("scoring_func"):
            assert got["moe_router_score_function"] == hf["scoring_func"]
        if "kv_lora_rank" in hf:
            assert got["config_class"] == "MLATransformerConfig" and got["qk_layernorm"]
            rope = hf["rope_scaling"]
            assert (got["rotary_scaling_factor"], got["mscale"], got["mscale_all_dim"]) == (
                rope["factor"], rope["mscale"], rope["mscale_all_dim"])


CHECKOUT_CONFIG = """
import json, sys, torch
from megatron.core.transformer.transformer_config import TransformerConfig
small = dict(num_layers=4, hidden_size=256, num_attention_heads=4, num_moe_experts=8,
             moe_ffn_hidden_size=128, moe_shared_expert_intermediate_size=128,
             expert_model_parallel_size=2, bf16=True, pipeline_dtype=torch.bfloat16,
             apply_rope_fusion=False, bias_activation_fusion=False,
             masked_softmax_fusion=False, gradient_accumulation_fusion=False)
try:
    TransformerConfig(**small, **json.loads(sys.argv[1]))
    print("PLAN3D-RUNS")
except (AssertionError, ValueError) as err:
    print("PLAN3D-REFUSED", err)
"""
"""The checkout's own TransformerConfig on a small MoE model with the settings under test."""

OVERLAP_FIELDS = {"--overlap-moe-expert-parallel-comm": "overlap_moe_expert_parallel_comm",
                  "--moe-shared-expert-overlap": "moe_shared_expert_overlap",
                  "--moe-token-dispatcher-type": "moe_token_dispatcher_type",
                  "--moe-flex-dispatcher-backend": "moe_flex_dispatcher_backend",
                  "--mtp-num-layers": "mtp_num_layers",
                  "--recompute-granularity": "recompute_granularity",
                  "--recompute-modules": "recompute_modules"}
"""The emitted flags the overlap's and the shared-expert overlap's checks read."""


def checkout_verdict(flags: dict) -> str:
    """What the checkout's TransformerConfig says of the emitted flags' OVERLAP_FIELDS:
    "runs", or its refusal."""
    fields = {}
    for flag, name in OVERLAP_FIELDS.items():
        if flag in flags:
            values = flags[flag]
            fields[name] = (True if not values else values if name == "recompute_modules"
                            else int(values[0]) if name == "mtp_num_layers" else values[0])
    out = subprocess.run([PYTHON, "-c", CHECKOUT_CONFIG, json.dumps(fields)],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=CHECKOUT))
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("PLAN3D-")]
    assert line, out.stderr[-3000:]
    return "runs" if line[-1] == "PLAN3D-RUNS" else line[-1].removeprefix("PLAN3D-REFUSED ")


def test_the_overlap_rules_are_the_checkouts():
    # moe: what plan3d runs of the all-to-all overlap and the shared-expert overlap, and what it
    # refuses, is what TransformerConfig.__post_init__ @ d98e8a64dd runs and refuses
    # (transformer_config.py l.1820-1826: the shared-expert overlap with alltoall or flex;
    # l.3030-3046: the overlap without `moe` recomputed, without the shared-expert overlap, with
    # at most one MTP layer), each refusal quoting Megatron's words
    from planner.catalog import load_model

    dsv3 = load_model("deepseek-v3")
    cases = [({}, None),
             ({"moe_shared_expert_overlap": True}, "disable moe_shared_expert_overlap when "
              "enabling overlap_moe_expert_parallel_comm"),
             ({"recompute_modules": ["core_attn", "moe"]}, "disable moe in recompute_modules "
              "when enabling overlap_moe_expert_parallel_comm"),
             ({"model": dsv3.model_copy(update={"mtp_layers": 2})}, "MTP supports at most one "
              "layer when enabling overlap_moe_expert_parallel_comm."),
             ({"moe_a2a_overlap": False, "moe_shared_expert_overlap": True,
               "moe_dispatcher": "deepep"}, None)]
    for fields, said in cases:
        model = fields.pop("model", dsv3)
        refusal, flags = overlap_case(model, **fields)
        verdict = checkout_verdict(flags)
        if said is None:
            assert refusal is None and verdict == "runs", (fields, refusal, verdict)
        else:
            assert verdict == said and f'"{said}"' in refusal, (fields, refusal, verdict)
