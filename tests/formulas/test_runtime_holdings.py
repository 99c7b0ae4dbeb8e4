"""Hand-derived bytes of what a process holds beside its tensors (planner/formulas/runtime.py),
from NCCL's constants @ 5067397c and Transformer Engine's workspace size @ d0067d0."""

from __future__ import annotations

from planner.formulas import runtime as RT

MiB = 2**20


def test_nccl_protocol_fifos():
    # LL: 8 lines · 512 threads · 8 steps · 16 B = 524,288
    assert RT.LL_BYTES == 524_288
    # LL128: 120 · 640 · 8 · 8 = 4,915,200
    assert RT.LL128_BYTES == 4_915_200
    # one connection: 524,288 + 4,915,200 + 4,194,304 = 9,633,792 → 5 · 2 MiB = 10,485,760, the
    # allocation size NCCL logs per channel and peer (NVIDIA/nccl#1685)
    assert RT.nccl_connection_bytes() == 10_485_760
    # NCCL_BUFFSIZE = 16 MiB: 524,288 + 4,915,200 + 16,777,216 = 22,216,704 → 11 · 2 MiB
    assert RT.nccl_connection_bytes(simple_bytes=16 * MiB) == 22 * MiB


def test_nccl_communicator_and_p2p():
    # 32 ring channels × 10 MiB = 320 MiB; a group of one rank never connects
    assert RT.nccl_collective_bytes(32, RT.nccl_connection_bytes(), 1) == 320 * MiB
    assert RT.nccl_collective_bytes(32, RT.nccl_connection_bytes(), 0) == 0
    # pipeline send/recv over the network: 2 peers × 2 channels × 128 KiB · 8 = 4 MiB
    assert RT.nccl_p2p_bytes(2, 2, RT.P2P_NET_CHUNK) == 4 * MiB
    # all-to-all over 8 NVLink ranks: 7 peers × 32 channels × 512 KiB · 8 = 896 MiB
    assert RT.nccl_p2p_bytes(7, 32, RT.P2P_NVL_CHUNK) == 896 * MiB


def test_workspace_and_graphs():
    # TE on Hopper: 32 MiB + 1 KiB per stream; 4 streams = 134,221,824 B
    assert RT.workspace_bytes(4) == 4 * (32 * MiB + 1024)
    # 10 captured layers × 64 MiB in/out × 2 in flight = 1280 MiB
    assert RT.cuda_graph_pool_bytes(10, 64 * MiB, 2) == 1280 * MiB
    assert RT.runtime_holdings_bytes(512 * MiB, 320 * MiB, 32 * MiB, 0) == 864 * MiB
