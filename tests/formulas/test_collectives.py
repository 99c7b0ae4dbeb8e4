"""NCCL's tuner model (planner/formulas/collectives.py): hand-derived cases for every algorithm
at small and large rank counts (tests/cases/collectives.toml, the arithmetic beside each), the
tuner's pick, and the same formulas on arrays and symbols."""

from __future__ import annotations

import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sympy as sp

from planner.formulas import collectives as K
from planner.model.nccl import nccl_pick, nccl_s, tuner_link

CASES = tomllib.loads((Path(__file__).parents[1] / "cases" / "collectives.toml").read_text())
GB, US = 1e9, 1e-6
# the cases' cluster: Hopper, Intel hosts, NVLS at 480 GB/s, SHARP, 8 NICs per node
NVLS_BW, NICS = 480 * GB, 8


def _coll(name):
    return next(c for c in K.Coll if c.value == name)


def _times(case, sharp=True):
    """Every available (algorithm, protocol) of the case's collective, with its time."""
    coll, n, k, bw = _coll(case["coll"]), case["n"], case["k"], case["busbw_gb"] * GB
    ll_max = K.ll_max_busbw(K.Gen.HOPPER, k)
    net = case.get("net_busbw_gb", case["busbw_gb"]) * GB
    return {(a, p): K.candidate_time_s(coll, a, p, case["bytes"], n, k, bw, ll_max, net, NVLS_BW,
                                       NICS, caps=_caps(case))
            for a, p in K._candidates(coll, nvls=True, sharp=sharp)}


def _caps(case):
    """The case's per-channel caps (K.channel_caps) where it names its channels, else None."""
    if "channels" not in case:
        return None
    return K.channel_caps(case["k"], case["channels"], K.Gen(case["gen"]))


def _link(case, sharp):
    """The case's group as the tuner is told of it (model/nccl.py tuner_link's fields)."""
    return SimpleNamespace(n_nodes=case["k"], busbw=case["busbw_gb"] * GB,
                           ll_max=K.ll_max_busbw(K.Gen.HOPPER, case["k"]),
                           net_busbw=case.get("net_busbw_gb", case["busbw_gb"]) * GB,
                           nvls_bw=NVLS_BW, nics_per_node=NICS, net_overhead_us=1.0, nvls=1,
                           sharp=int(sharp))


@pytest.mark.parametrize("case", CASES["case"], ids=lambda c: f"{c['algo']}-{c['proto']}-{c['n']}")
def test_each_algorithm_and_protocol_by_hand(case):
    key = (K.Algo(case["algo"]), K.Proto[case["proto"]])
    assert _times(case)[key] / US == pytest.approx(case["expected_us"], rel=1e-6)


@pytest.mark.parametrize("case", CASES["pick"], ids=lambda c: f"{c['algo']}-{c['n']}")
def test_the_tuner_picks_the_fastest_enabled(case):
    sharp = case.get("sharp", False)
    pick = nccl_pick(_coll(case["coll"]), case["bytes"], case["n"], _link(case, sharp))
    assert (pick.algo.value, pick.proto.name) == (case["algo"], case["proto"])
    t = pick.time_s
    assert t == min(_times(case, sharp).values())
    # the vectorised minimum is the same number
    assert K.nccl_time_s(_coll(case["coll"]), case["bytes"], case["n"], case["k"],
                         case["busbw_gb"] * GB, K.ll_max_busbw(K.Gen.HOPPER, case["k"]),
                         case["busbw_gb"] * GB, NVLS_BW, NICS, nvls=True, sharp=sharp) == t


def test_send_recv_and_all_to_all_by_hand():
    for case in CASES["send_recv"]:
        t = K.send_recv_time_s(case["bytes"], case["busbw_gb"] * GB, case["inside"])
        assert t / US == pytest.approx(case["expected_us"], rel=1e-6)
    for case in CASES["all_to_all"]:
        t = K.all_to_all_time_s(case["bytes"], case["n"], case["busbw_gb"] * GB, case["inside"])
        assert t / US == pytest.approx(case["expected_us"], rel=1e-6)


def test_what_cannot_run_is_never_picked():
    # PAT needs one rank per node; NVLS-tree and CollNet need more than one node; NVLS one node
    one_node = _times(dict(coll="all-reduce", bytes=1e6, n=8, k=1, busbw_gb=370.0))
    for algo in (K.Algo.NVLS_TREE, K.Algo.COLLNET_DIRECT, K.Algo.COLLNET_CHAIN):
        assert one_node[(algo, K.Proto.SIMPLE)] == K.DISABLED_S
    gather = _times(dict(coll="all-gather", bytes=1e3, n=16, k=2, busbw_gb=368.0))
    assert gather[(K.Algo.PAT, K.Proto.SIMPLE)] == K.DISABLED_S  # 8 ranks per node
    assert (K.Algo.TREE, K.Proto.LL) not in gather  # the tree is all-reduce only
    plain = K._candidates(K.Coll.ALL_REDUCE)
    assert {a for a, _ in plain} == {K.Algo.RING, K.Algo.TREE}  # no NVLS, no SHARP
    assert K.nccl_time_s(K.Coll.ALL_REDUCE, 1e6, 1, 1, 370 * GB, 141 * GB, 46 * GB, 0, 8) == 0


def test_a_thousand_small_collectives_cost_a_thousand_latencies():
    # 1 GB reduced in 1,000 buckets of 1 MB over 512 ranks on 64 nodes costs more than in one go
    # by about 999 latencies: ring LL's 6.6 + 448·1.0 + 63·2.7 (reduce-scatter, 624.7 µs) each
    args = (512, 64, 368 * GB, K.ll_max_busbw(K.Gen.HOPPER, 64), 368 * GB, NVLS_BW, NICS)
    one = K.nccl_time_s(K.Coll.REDUCE_SCATTER, 1e9, *args, nvls=True)
    many = K.many_collectives_s(1000, K.nccl_time_s(K.Coll.REDUCE_SCATTER, 1e6, *args,
                                                    nvls=True))
    assert many - one > 999 * 624.7 * US * 0.7
    # and the latency grows with the ranks: linear for the ring, ~log for the tree
    ring = [K.ring_latency_s(K.Coll.ALL_REDUCE, K.Proto.SIMPLE, 8 * k, k) for k in (2, 4, 8, 16)]
    tree = [K.tree_latency_s(K.Proto.SIMPLE, 8 * k, k) for k in (2, 4, 8, 16)]
    assert np.all(np.diff(ring) > 0) and np.allclose(np.diff(tree), 2 * 14 * US)


def test_arrays_agree_with_floats_row_by_row():
    sizes = np.array([1e3, 1e5, 1e6, 3e7, 1e9, 4e9])
    ranks = np.array([8.0, 64, 512, 64, 1024, 16])
    nodes = np.array([1.0, 8, 64, 64, 128, 2])
    for coll in K.Coll:
        vec = K.nccl_time_s(coll, sizes, ranks, nodes, 368 * GB,
                            K.ll_max_busbw(K.Gen.HOPPER, nodes), 368 * GB, NVLS_BW, NICS,
                            nvls=True, sharp=True)
        one = [K.nccl_time_s(coll, float(b), float(n), float(k), 368 * GB,
                             K.ll_max_busbw(K.Gen.HOPPER, float(k)), 368 * GB, NVLS_BW, NICS,
                             nvls=True, sharp=True) for b, n, k in zip(sizes, ranks, nodes)]
        assert np.allclose(vec, one, rtol=1e-12)


def test_symbols_give_the_papers_ring_and_tree():
    m, k, B, W = sp.symbols("m k B W", positive=True)
    n = m + 2  # two ranks or more
    # one node: ring Simple all-reduce = 8.4 + 2(n − 1)·3.4 µs + B·2(n − 1)/(n·W)
    ring = K.ring_time_s(K.Coll.ALL_REDUCE, K.Proto.SIMPLE, B, n, 1, W, 141 * GB)
    want = (sp.Rational(84, 10) + 2 * (n - 1) * sp.Rational(34, 10)) * sp.Float(US) \
        + B * 2 * (n - 1) / (n * W)
    assert sp.simplify(ring - want).evalf(chop=True) == 0
    # tree latency: 2((n/k − 1)·4.0 + log2(k)·14) + 8.4, for k a power of two
    lat = K.tree_latency_s(K.Proto.SIMPLE, n, k)
    assert lat.subs({m: 62, k: 8}) == pytest.approx(148.4 * US)


def test_a_groups_network_is_its_own_ranks_nics():
    # K.group_net_busbw: W_node · min(1, r · NICs per GPU / NICs per node). A node of 8 GPUs,
    # one NIC each, 8 × 46 = 368 GB/s of network: a one-rank DP group (tp = 8) owns 1 NIC,
    # 368 · min(1, 1·1/8) = 46 GB/s; four ranks 184; eight (or more) the whole 368
    node = 368 * GB
    assert K.group_net_busbw(node, 1, 1, 8) == pytest.approx(46 * GB)
    assert K.group_net_busbw(node, 4, 1, 8) == pytest.approx(184 * GB)
    assert K.group_net_busbw(node, 16, 1, 8) == pytest.approx(368 * GB)


def test_the_cost_path_and_explain_price_a_group_on_one_link():
    # one tuner_link (K.group_net_busbw inside) feeds both the cost path (nccl_s) and the pick
    # explain shows (nccl_pick): a 64-rank all-reduce of 25 MB over 64 nodes, one rank per node,
    # at half its link; the network it is told of is one NIC's 46 GB/s × 0.5, not the node's
    # 8 · 46 = 368 (net_bw × NICs per node)
    x = SimpleNamespace(ll_max_one=141 * GB, ll_max_two=39 * GB, ll_max_many=20.4 * GB,
                        net_bw=46 * GB, nics_per_gpu=1.0, nics_per_node=8.0,
                        nvls_bw=480 * GB, net_overhead_us=1.0, nvls=1, sharp=0)
    group = SimpleNamespace(k=64, r=1, bw=46 * GB)
    link = tuner_link(x, group, 0.5)
    assert link.net_busbw == pytest.approx(23 * GB)
    assert link.busbw == pytest.approx(23 * GB) and link.nvls_bw == pytest.approx(240 * GB)
    for coll in K.Coll:
        pick = nccl_pick(coll, 25e6, 64, link)
        assert pick.time_s == pytest.approx(nccl_s(coll, 25e6, 64, link), rel=1e-12)
        assert pick.latency_s > 0 and pick.transfer_s > 0


def test_all_to_all_split_by_hand():
    """The expert-parallel all-to-all: NCCL's per-peer rounds, LL at ≤ 16 KiB per peer, the
    NVLink and network peers served at once (tests/cases/collectives.toml, arithmetic there)."""
    for case in CASES["all_to_all_split"]:
        lat, wire = K.all_to_all_split_parts_s(case["bytes"], case["n"], case["g"], 360 * GB,
                                               46 * GB)
        assert (lat + wire) / US == pytest.approx(case["expected_us"], rel=1e-6)
        assert lat / US == pytest.approx(case["latency_us"], rel=1e-9)  # the case's protocol


def test_all_to_all_split_reduces_to_the_whole_group_forms():
    """Inside one domain (g = n) the split form is all_to_all_time_s at W_nvl for Simple; one
    rank sends nothing; arrays and symbols agree with floats."""
    b, n = 50e6, 8
    assert K.all_to_all_split_time_s(b, n, n, 360 * GB, 46 * GB) == pytest.approx(
        K.all_to_all_time_s(b * n / (n - 1), n, 360 * GB, 1))
    assert K.all_to_all_split_time_s(0, 1, 1, 360 * GB, 46 * GB) == 0
    arr = K.all_to_all_split_time_s(np.array([70e6, 63e6]), np.array([8.0, 64.0]),
                                    np.array([8.0, 8.0]), 360 * GB, 46 * GB)
    assert arr / US == pytest.approx([206.2444, 1337.7913], rel=1e-6)


def test_alltoall_busbw_by_hand_and_symbolically():
    """W(S) = W∞/(1 + (W∞·τ/S)^0.47): half W∞ at S = W∞·τ; W∞ at every size without a ramp
    (τ = 0); at H100's figures (355 GB/s, 10.3 µs) and a 256 MiB buffer: W∞·τ/S =
    3,656,500/268,435,456 = 0.013621, ^0.47 = 0.13278, W = 355/1.13278 = 313.39 GB/s."""
    assert K.alltoall_busbw(355 * GB * 10.3e-6, 355 * GB, 10.3e-6) == pytest.approx(177.5 * GB)
    assert K.alltoall_busbw(1e6, 355 * GB, 0.0) == 355 * GB
    assert K.alltoall_busbw(2**28, 355 * GB, 10.3e-6) == pytest.approx(313.39 * GB, rel=1e-4)
    s, w, tau = sp.symbols("S W tau", positive=True)
    form = K.alltoall_busbw(s, w, tau)
    # (S floored at one byte: an empty call divides by nothing)
    assert sp.simplify(form - w / (1 + (w * tau / sp.Max(1, s)) ** K.ALLTOALL_RAMP_EXPONENT)) == 0
    arr = K.alltoall_busbw(np.array([2**25, 2**34]), 355 * GB, 10.3e-6)
    assert arr[0] < arr[1] < 355 * GB  # rising with the buffer, below its top


# nccl-tests alltoall_perf busbw (GB/s) by buffer (bytes), the profiles' sources: 8x H100 in one
# node, the median of ten (xxrjun/nccl-tests-cluster @ 455de4f, single-node/runs/20260128-145017
# logs nccl_N1_G8_cnode3-0{02..11}.log); 8 GB300 over multi-node NVLink (oracle-quickstart/
# oci-gpu-quickstarts @ 61eba7f, nvidia/GB300/README-GB300.md, "2 Hosts Single Rack")
A2A_MEASURED = {
    "h100-nvlink": {2**25: 234.8, 2**26: 273.7, 2**27: 293.8, 2**28: 306.0, 2**29: 314.9,
                    2**30: 330.8, 2**31: 342.6, 2**32: 344.1, 2**33: 346.2, 2**34: 347.9},
    "gb300-nvl72": {2**23: 218.53, 2**24: 290.88, 2**25: 374.31, 2**26: 451.47, 2**27: 515.87,
                    2**28: 561.64, 2**29: 589.91, 2**30: 630.39, 2**31: 628.52, 2**32: 669.63,
                    2**33: 679.65, 2**34: 685.06},
}


@pytest.mark.parametrize("name", sorted(A2A_MEASURED))
def test_the_profiles_alltoall_curves_reproduce_their_measurements(name):
    """The profile's W∞ and τ, through the model's own all-to-all (NCCL's latency and the
    transfer at alltoall_busbw), give nccl-tests' busbw B/t (B = 7/8 of the buffer sent) within
    3 % at every measured size from 8 MiB: a check of the fit the profile states, not a
    validation."""
    from planner.catalog import load_hardware

    fast = load_hardware(name).fast
    for size, busbw in A2A_MEASURED[name].items():
        sent = size * 7 / 8
        w = K.alltoall_busbw(size, fast.alltoall_busbw_gb_per_s * GB, fast.alltoall_ramp_s)
        t = sum(K.all_to_all_split_parts_s(sent, 8, 8, w, 46 * GB))
        assert sent / t / GB == pytest.approx(busbw, rel=0.03), size


def test_the_search_gives_one_channel_per_nic_doubled_below_five():
    # K.search_channels (ncclTopoDupChannels @ v2.30.7-1): channels double unless under 25 GB/s,
    # or on Hopper and later under 50 GB/s with more than 4. Eight NDR NICs (46 GB/s each):
    # 8 (not doubled); one: 1 -> 2; four: 4 -> 8; eight HDR (23 GB/s): 8; Ampere with one
    # 46 GB/s NIC: 2 (the Hopper exemption does not apply, 46 >= 25)
    assert K.search_channels(8, 46 * GB) == 8
    assert K.search_channels(1, 46 * GB) == 2
    assert K.search_channels(4, 46 * GB) == 8
    assert K.search_channels(8, 23 * GB, hopper_or_later=False) == 8
    assert K.search_channels(8, 46 * GB, hopper_or_later=False) == 16
    assert K.search_channels(0.5, 46 * GB) == 2  # two GPUs share a NIC: at least one channel


def test_the_caps_bind_across_nodes_only():
    # one node: no cap (NVLink channels); two nodes: N2 ceilings; three or more: N4. Blackwell
    # tree with 8 channels: 8·42.8 = 342.4 on two nodes, 8·24 = 192 on more
    bw = K.Gen.BLACKWELL
    assert K.channel_caps(1, 8, bw)[0] == K.NO_CAP
    assert K.channel_caps(2, 8, bw)[0] == pytest.approx(342.4 * GB)
    assert K.channel_caps(64, 8, bw)[0] == pytest.approx(192 * GB)
    assert K.channel_caps(64, 8, bw)[2] == pytest.approx(320 * GB)
