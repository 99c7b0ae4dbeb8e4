"""One nccl-tests run as plan3d prices it: `all_reduce_perf` (or all_gather_perf,
reduce_scatter_perf) over n GPUs of a profile's cluster, every GPU a rank, the ranks filling the
nodes in order (mpirun/srun's block placement, as nccl-tests is launched), the whole cluster's
links for the one communicator. The tuner's pick and its time come from the same functions that
price a plan's collectives (model/links.py collective_group, model/nccl.py tuner_link and
nccl_pick), so a published nccl-tests table checks them (tests/model/test_nccl_at_scale.py,
scripts/nccl_at_scale.py)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from ..formulas import collectives as K
from ..formulas.choices import Precision
from ..schema import HardwareProfile
from .links import collective_group
from .nccl import Pick, nccl_pick, tuner_link
from .numbers import hardware_numbers


@dataclass(frozen=True)
class BenchCall:
    """One nccl-tests line as plan3d predicts it: the tuner's (or the forced algorithm's) pick,
    its time, and the bus bandwidth nccl-tests would print for that time."""

    pick: Pick
    busbw_bytes_per_s: float

    @property
    def time_s(self) -> float:
        return self.pick.time_s


def bench_link(hw: HardwareProfile, n_ranks: int) -> SimpleNamespace:
    """The tuner's link for one communicator of n consecutive ranks on the profile's cluster
    (stride 1: a node's GPUs are neighbours), at the whole of the link (share 1: nothing else
    runs beside a benchmark)."""
    x = SimpleNamespace(**hardware_numbers(hw, Precision.BF16))
    group = collective_group(x, n_ranks, 1, x.domain)
    return tuner_link(x, group, 1.0)


def bench_call(hw: HardwareProfile, coll: K.Coll, size_bytes: float, n_ranks: int,
               algo: K.Algo | None = None) -> BenchCall | None:
    """One nccl-tests line: `size_bytes` its size column (the all-reduce's buffer, the
    all-gather's output, the reduce-scatter's input), n ranks; `algo` what NCCL_ALGO forces
    (None: the tuner's own pick). None where the cluster does not offer the algorithm."""
    pick = nccl_pick(coll, size_bytes, n_ranks, bench_link(hw, n_ranks), algo)
    if pick is None:
        return None
    return BenchCall(pick, float(K.nccl_tests_busbw(coll, size_bytes, n_ranks, pick.time_s)))


def with_overrides(hw: HardwareProfile, overrides: dict) -> HardwareProfile:
    """The profile with a published run's stated differences, {"section.field": value} (e.g.
    {"topology.nics_per_node": 4}), validated as the profile is."""
    sections: dict[str, dict] = {}
    for key, value in overrides.items():
        section, field = key.split(".")
        sections.setdefault(section, {})[field] = value
    data = hw.model_dump()
    for section, fields in sections.items():
        data[section] = {**data[section], **fields}
    return HardwareProfile.model_validate(data)


def row_call(row: dict, hw: HardwareProfile) -> BenchCall | None:
    """A published nccl-tests line (tests/data/nccl_at_scale.json's row form) as plan3d calls it
    on `hw` (the row's profile with its overrides); None where plan3d does not offer the forced
    algorithm."""
    return bench_call(hw, K.Coll(row["collective"]), row["size_bytes"], row["gpus"],
                      K.Algo(row["algo"]) if row.get("algo") else None)


def compared(row: dict, call: BenchCall) -> tuple[float, float]:
    """(predicted, measured) for a row's call: both bus bandwidths in GB/s where the row gives
    one, else both times in µs."""
    if "measured_busbw_gb_s" in row:
        return call.busbw_bytes_per_s / 1e9, row["measured_busbw_gb_s"]
    return call.time_s * 1e6, row["measured_time_us"]


def predict_row(row: dict, hw: HardwareProfile) -> tuple[float, float] | None:
    """A published nccl-tests line as plan3d prices it on `hw`: compared(row, row_call(row, hw)),
    None where plan3d does not offer the forced algorithm."""
    call = row_call(row, hw)
    return None if call is None else compared(row, call)
