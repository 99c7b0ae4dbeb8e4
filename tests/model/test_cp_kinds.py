"""Context-parallel kinds end to end (issue 15, item 4): the plan's cp_kind through the cost model
(volumes by hand, the kinds as the ends of the hierarchy), the heads rule, which framework runs
which, the launch settings, the command line and the search."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp
from typer.testing import CliRunner

from planner.catalog import load_hardware, load_model
from planner.cli import app
from planner.errors import PlanError
from planner.formulas.choices import ContextKind
from planner.frameworks import FRAMEWORKS, a2a_ranks
from planner.model.context import context_parts
from planner.model.cost import Choices, numbers, plan_costs
from planner.model.estimate import estimate
from planner.schema import PlanConfig
from planner.search.core import search
from planner.search.evaluate import evaluate_space
from planner.search.request import PlanRequest
from planner.search.space import config_at

MiB = 2**20
RING, A2A, HIER = ContextKind.RING, ContextKind.ALL_TO_ALL, ContextKind.HIERARCHICAL
H100 = load_hardware("h100-nvlink")
LLAMA70 = load_model("70b")  # a = 64 heads, k = 8 KV heads, d_h = 128, L = 80
runner = CliRunner()


def config(**over) -> PlanConfig:
    base = dict(dp=1, tp=8, pp=1, cp=4, gbs=1, n_micro=1, seq_len=32768)
    return PlanConfig(**{**base, **over})


def cp_bytes(c: PlanConfig, model=LLAMA70) -> float:
    return float(plan_costs(numbers(model, H100, c), Choices.of(c))["cp_bytes"])


# ---- volumes by hand ----------------------------------------------------------------------------

def test_volumes_by_kind_llama_70b_32k_t8_c4():
    # Llama 3.1 70B, s = 32,768, b = 1, t = 8, c = 4, 16-bit; per layer and micro-batch, forward
    # and backward; cp_bytes = L·m·layer = 80·1·layer (pp = 1). The volumes only: at t = 8 the
    # all-to-all kinds break the heads rule (t·c_a must divide the 8 KV heads), which explain and
    # search enforce (test_heads_rule_64_heads_8_kv_heads); plan_costs prices what it is given.
    # one K/V chunk: 2 B · 2 (K, V) · 8,192 tokens · 8/8 KV heads · 128 = 4 MiB
    # one rank's Q, K, V and output: 2 B · 8,192 · 128 · (2·64 + 2·8)/8 = 2·8,192·128·18 B = 36 MiB
    # ring: 3·(c − 1) chunks = 9 · 4 MiB = 36 MiB
    assert cp_bytes(config()) == 80 * 36 * MiB
    # all-to-all (Ulysses, c_a = 4): 2·(c − 1)/c · 36 MiB = 1.5 · 36 MiB = 54 MiB
    assert cp_bytes(config(cp_kind="a2a")) == 80 * 54 * MiB
    # hierarchical 2 × 2 (c_a = 2): 2·(1/2) · 36 MiB + 3·(4/2 − 1) · 4 MiB = 36 + 12 = 48 MiB
    assert cp_bytes(config(cp_kind="hierarchical", cp_a2a=2)) == 80 * 48 * MiB
    # DeepSpeed's default is the all-to-all: the same 54 MiB as Megatron's a2a
    assert cp_bytes(config(framework="deepspeed", sequence_parallel=False)) == 80 * 54 * MiB


def test_the_framework_default_kind_is_unchanged():
    # cp_kind None is each framework's default: Megatron and torchtitan the ring, DeepSpeed the
    # all-to-all; naming it changes no number
    for fw, kind in (("megatron", "ring"), ("torchtitan", "ring"), ("deepspeed", "a2a")):
        extra = dict(zero_stage=3, sequence_parallel=fw != "deepspeed", framework=fw)
        named = plan_costs(numbers(LLAMA70, H100, config(cp_kind=kind, **extra)),
                           Choices.of(config(cp_kind=kind, **extra)))
        plain = plan_costs(numbers(LLAMA70, H100, config(**extra)), Choices.of(config(**extra)))
        assert {k: float(v) for k, v in named.items()} == {k: float(v) for k, v in plain.items()}


@pytest.mark.parametrize("tp, cp", [(1, 8), (2, 4), (1, 16), (8, 2)])
def test_the_general_form_at_its_ends_is_the_ring_and_ulysses(tp, cp):
    # the search prices every kind with the hierarchical form and a c_a column: at c_a = 1 it is
    # the ring, at c_a = cp the all-to-all, to the last bit, in every reported quantity
    dp = 512 // (tp * cp)
    for c_a, kind in ((1, RING), (cp, A2A)):
        plain = config(dp=dp, tp=tp, cp=cp, gbs=dp, seq_len=65536, cp_kind=kind)
        x = numbers(LLAMA70, H100, plain)
        x.cp_a2a = c_a
        general = plan_costs(x, replace(Choices.of(plain), cp_kind=HIER))
        ref = plan_costs(numbers(LLAMA70, H100, plain), Choices.of(plain))
        assert {k: float(v) for k, v in general.items()} == {k: float(v) for k, v in ref.items()}


def test_hierarchical_identities_on_symbols():
    # sympy: the hierarchical parts with c_a = 1 are the ring's, with c_a = c Ulysses'
    s, b, a, k, d, t, c, act = sp.symbols("s b a k d_h t c act", positive=True)
    x = SimpleNamespace(n_heads=a, n_kv_heads=k, head_dim=d, act_bytes=act, cp_a2a=1)
    choices = Choices.of(config())

    def layer(kind, c_a):
        return context_parts(SimpleNamespace(**{**vars(x), "cp_a2a": c_a}),
                             replace(choices, cp_kind=kind), s, b, t, c).layer

    assert sp.simplify(layer(HIER, 1) - layer(RING, 1)) == 0
    assert sp.simplify(layer(HIER, c) - layer(A2A, 1)) == 0
    # Ulysses against the ring: 2(c − 1)/c·(a + k)/k chunks against 3(c − 1), a ratio of
    # 2(a + k)/(3ck): Ulysses moves less when c > 2(a + k)/(3k) (70B: c > 6; a = k: c > 4/3)
    ratio = sp.simplify(layer(A2A, 1) / layer(RING, 1))
    assert sp.simplify(ratio - 2 * (a + k) / (3 * c * k)) == 0


def test_all_to_all_is_exposed_and_the_ring_hidden():
    # Llama-2-13B (a = k = 40), 128 H100, s = 128 Ki, tp 1, cp 8 inside one node: the ring's
    # 3·7 = 21 K/V chunks hide under the attention blocks but for 0.29 s a step; Ulysses moves
    # 2·(7/8)·2 = 3.5 chunks' worth (6× less) and shows all of it, at the all-to-all's own
    # rate: Q, K, V, O of b·(s/c)·d_h·a·ε = 16,384·128·40·2 = 167,772,160 B, 7/8 of each sent,
    # both directions: 1,174,405,120 B a layer in 8 calls of 146,800,640 B, nccl-tests' buffer
    # S = 167,772,160 B; W = 355/(1 + (355e9·10.3e-6/S)^0.47) = 355/(1 + 0.021794^0.47)
    # = 355/1.16559 = 304.57 GB/s (K.alltoall_busbw, h100-nvlink.toml's measured curve);
    # 40 layers × 2 micro-batches × (1,174,405,120/304.57e9 + 8 × 11.8 µs) = 0.3160 s, more
    # than the ring leaves exposed: at 168 MB calls the all-to-all runs at 82 % of the ring's
    # 370 GB/s
    m = load_model("13b")
    c = dict(dp=16, tp=1, cp=8, gbs=32, n_micro=2, seq_len=131072, zero_stage=3,
             sequence_parallel=False)
    ring, a2a = (estimate(m, H100, PlanConfig(**c, cp_kind=k)) for k in ("ring", "a2a"))
    assert a2a.comm.cp_bytes == pytest.approx(ring.comm.cp_bytes / 6)
    w = 355e9 / (1 + (355e9 * 10.3e-6 / 167_772_160) ** 0.47)
    assert a2a.time.cp_exposed_s == pytest.approx(80 * (1_174_405_120 / w + 8 * 11.8e-6),
                                                  rel=1e-6)
    assert ring.time.cp_exposed_s < a2a.time.cp_exposed_s
    # memory: under flash attention a rank holds s/c tokens' Q, K, V, O and LSE either way
    assert a2a.memory.total_bytes == ring.memory.total_bytes


def test_hierarchical_keeps_the_all_to_all_on_nvlink():
    # 13B on 128 H100, tp 1, cp 16: the ring spans two nodes and runs at the NIC's speed;
    # a2a+p2p with c_a = 8 keeps the all-to-all inside the node and rings over 2 across it
    m = load_model("13b")
    c = dict(dp=8, tp=1, cp=16, gbs=32, n_micro=4, seq_len=131072, zero_stage=3,
             sequence_parallel=False)
    ring = estimate(m, H100, PlanConfig(**c))
    h8 = estimate(m, H100, PlanConfig(**c, cp_kind="hierarchical", cp_a2a=8))
    assert ring.comm.cp_link == "network"
    assert h8.time.step_s < 0.6 * ring.time.step_s
    assert h8.time.cp_exposed_s < ring.time.cp_exposed_s / 10


# ---- rules ------------------------------------------------------------------------------------

def test_heads_rule_64_heads_8_kv_heads():
    # tp 8 leaves each rank 8 heads and 1 KV head: an all-to-all over 2 cannot split 1 KV head
    with pytest.raises(PlanError, match=r"tp·c_a = 8·2 = 16 must divide the 64 heads and the 8 KV"):
        estimate(LLAMA70, H100, config(dp=32, tp=8, cp=2, gbs=32, cp_kind="a2a"))
    with pytest.raises(PlanError, match="8 KV heads"):
        estimate(LLAMA70, H100, config(dp=16, tp=8, cp=4, gbs=16, cp_kind="hierarchical",
                                       cp_a2a=2))
    # tp 4: 2 KV heads per rank, split 2 ways; the ring has no such rule
    estimate(LLAMA70, H100, config(dp=64, tp=4, cp=2, gbs=64, cp_kind="a2a"))
    estimate(LLAMA70, H100, config(dp=32, tp=8, cp=2, gbs=32))
    # DeepSpeed-Ulysses too: tp 1, cp 16 splits 8 KV heads 16 ways (refused since cp-kind)
    with pytest.raises(PlanError, match="8 KV heads"):
        estimate(LLAMA70, H100, config(dp=32, tp=1, cp=16, gbs=32, framework="deepspeed",
                                       sequence_parallel=False, zero_stage=3))


def test_which_framework_runs_which():
    assert FRAMEWORKS["megatron"].cp_kinds == (RING, A2A, HIER)
    assert FRAMEWORKS["torchtitan"].cp_kinds == (RING,)
    assert FRAMEWORKS["deepspeed"].cp_kinds == (A2A,)
    titan = dict(dp=64, tp=4, cp=2, gbs=64, framework="torchtitan", zero_stage=3)
    with pytest.raises(PlanError, match="torchtitan: runs context parallelism as ring only"):
        estimate(LLAMA70, H100, config(**titan, cp_kind="a2a"))
    ds = dict(dp=64, tp=4, cp=2, gbs=64, framework="deepspeed", sequence_parallel=False)
    with pytest.raises(PlanError, match="deepspeed: runs context parallelism as a2a only"):
        estimate(LLAMA70, H100, config(**ds, cp_kind="ring"))
    for kind, c_a in (("ring", None), ("a2a", None)):
        estimate(LLAMA70, H100, config(dp=64, tp=4, cp=2, gbs=64, cp_kind=kind, cp_a2a=c_a))
    assert a2a_ranks(config(framework="deepspeed", sequence_parallel=False)) == 4
    assert a2a_ranks(config(cp_kind="hierarchical", cp_a2a=2)) == 2
    assert a2a_ranks(config()) == 1


def test_config_values_and_labels():
    assert config(cp_kind="ulysses").cp_kind is A2A
    assert config(cp_kind="a2a+p2p", cp_a2a=2).cp_kind is HIER
    assert config(cp_kind="a2a").short_label() == "dp1 tp8 pp1 cp4a2a z1 sel"
    assert config(cp_kind="hierarchical", cp_a2a=2).label(batch=False).startswith(
        "dp1 tp8 pp1 cp4h2 ")
    assert config(cp_kind="ring").short_label() == config().short_label()
    for bad, said in ((dict(cp_kind="hierarchical"), "needs cp_a2a"),
                      (dict(cp_kind="hierarchical", cp_a2a=4), "strictly between 1"),
                      (dict(cp_kind="hierarchical", cp_a2a=3), "must divide cp = 4"),
                      (dict(cp_a2a=2), "of the hierarchical kind"),
                      (dict(cp=1, cp_kind="hierarchical", cp_a2a=2), "must divide cp = 1"),
                      (dict(cp_kind="allgather"), "unknown context-parallel kind")):
        with pytest.raises(ValueError, match=said):
            config(**bad)


# ---- launch settings --------------------------------------------------------------------------

def emit(fmt: str, c: PlanConfig, model=LLAMA70):
    from planner.frameworks import FORMATS

    return FORMATS[fmt].emitters[fmt](c, model)


def test_megatron_and_nemo_write_the_kind():
    base = dict(dp=64, tp=2, cp=4, gbs=64, zero_stage=1)
    ring = emit("megatron", config(**base)).text
    assert "--cp-comm-type" not in ring  # p2p is Megatron's default
    a2a = emit("megatron", config(**base, cp_kind="a2a")).text
    assert "--cp-comm-type a2a \\" in a2a
    hier = emit("megatron", config(**base, cp_kind="hierarchical", cp_a2a=2)).text
    assert "--cp-comm-type a2a+p2p \\" in hier
    assert "--hierarchical-context-parallel-sizes 2 2 \\" in hier
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(emit("nemo", config(**base, cp_kind="hierarchical", cp_a2a=2)).text)
    assert doc["model"]["cp_comm_type"] == "a2a+p2p"
    assert doc["model"]["hierarchical_context_parallel_sizes"] == [2, 2]
    assert doc["dist"]["use_decentralized_pg"] is False
    doc = yaml.safe_load(emit("nemo", config(**base, cp_kind="a2a")).text)
    assert doc["model"]["cp_comm_type"] == "a2a" and "dist" not in doc
    assert "cp_comm_type" not in yaml.safe_load(emit("nemo", config(**base)).text)["model"]


def test_torchtitan_refuses_other_kinds_and_deepspeed_stays_ulysses():
    titan = config(dp=64, tp=2, cp=4, gbs=64, zero_stage=3, framework="torchtitan")
    emit("torchtitan", titan)
    with pytest.raises(PlanError, match="ring attention only"):
        emit("torchtitan", titan.model_copy(update={"cp_kind": A2A}))
    ds = config(dp=64, tp=2, cp=4, gbs=64, framework="deepspeed", sequence_parallel=False)
    assert emit("deepspeed", ds).text == emit("deepspeed", ds.model_copy(
        update={"cp_kind": A2A})).text


# ---- command line -------------------------------------------------------------------------------

EXPLAIN = ("explain", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink", "--tp", "4",
           "--cp", "4", "--seq-len", "32768", "--gbs", "64", "--zero", "3")


def test_cli_cp_kind():
    r = runner.invoke(app, [*EXPLAIN, "--cp-kind", "hierarchical", "--cp-a2a", "2", "--json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.stdout)
    assert plan["config"]["cp_kind"] == "a2a+p2p" and plan["config"]["cp_a2a"] == 2
    # the same plan reads back from its own config values
    r = runner.invoke(app, [*EXPLAIN, "--cp-a2a", "2", "--brief"])
    assert r.exit_code == 0 and "cp4h2" in r.stdout, r.output
    for args, said in ((["--cp-kind", "allgather"], "allgather kind"),
                       (["--cp-kind", "foo"], "not one of ring, a2a, hierarchical"),
                       (["--cp-kind", "hierarchical"], "needs --cp-a2a"),
                       (["--cp-kind", "auto"], "auto is for search"),
                       (["--cp-kind", "a2a", "--tp", "8"], "8 KV heads")):
        r = runner.invoke(app, [*EXPLAIN, *args])
        assert r.exit_code != 0
        assert said in r.output and "Traceback" not in r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_cli_search_refuses_kinds_the_framework_does_not_run():
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--cp-kind", "a2a",
                            "--framework", "torchtitan"])
    assert r.exit_code == 2
    assert "torchtitan runs context parallelism as ring only" in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def test_cli_search_cp_kind_a2a_only():
    r = runner.invoke(app, ["search", "--model", "70b", "--gpus", "512", "--hw", "h100-nvlink",
                            "--cp", "4", "--seq-len", "32768", "--cp-kind", "a2a", "--json"])
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    assert plans and all(p["config"]["cp_kind"] == "a2a" for p in plans)
    assert all(p["config"]["tp"] <= 2 for p in plans)  # t·4 must divide the 8 KV heads


# ---- search -------------------------------------------------------------------------------------

def test_search_default_opens_every_kind_and_a_list_narrows_it():
    m = load_model("13b")
    req = PlanRequest(gpus=128, seq_len=131072, gbs=32, cp_kind=[ContextKind.RING])
    cols, _ = evaluate_space(m, H100, req)
    assert np.all(cols["cp_a2a"] == 1)  # Megatron's ring alone, as before kinds existed
    auto = req.model_copy(update={"cp_kind": None})  # the default: every kind Megatron runs
    cols, costs = evaluate_space(m, H100, auto)
    c_a = cols["cp_a2a"]
    assert (c_a == 1).any() and ((c_a > 1) & (c_a < cols["cp"])).any() and (
        (c_a == cols["cp"]) & (cols["cp"] > 1)).any()
    # the search's general form agrees with each plan's own, row by row
    rng = np.random.default_rng(3)
    for i in rng.choice(np.flatnonzero(cols["cp"] > 1), size=20, replace=False):
        plan = estimate(m, H100, config_at(m, auto, cols, int(i)))
        assert plan.time.step_s == pytest.approx(costs["step_s"][i], rel=1e-9)
        assert plan.comm.cp_bytes == pytest.approx(costs["cp_bytes"][i], rel=1e-9)


def test_a_hierarchical_plan_wins_at_long_sequences():
    # Llama-2-13B on 128 H100 at 128 Ki tokens: with every kind open the fastest plan runs
    # a2a+p2p (the all-to-all inside the node, the ring across it), faster than any ring plan
    m = load_model("13b")
    req = PlanRequest(gpus=128, seq_len=131072, gbs=32)
    ring = search(m, H100, req.model_copy(update={"cp_kind": [ContextKind.RING]}), top=10)
    auto = search(m, H100, req, top=10)
    fastest = min(auto.plans, key=lambda p: p.time.step_s)
    assert fastest.config.cp_kind is HIER
    assert fastest.time.step_s < min(p.time.step_s for p in ring.plans)
    assert H100.gpus_per_domain % (fastest.config.tp * fastest.config.cp_a2a) == 0
