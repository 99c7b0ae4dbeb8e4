"""Typed outputs. Their field names are a stable interface: scripts and CI jobs read them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from .schema import PlanConfig


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class PlanWarning(_Out):
    code: str
    message: str


class ModelSummary(_Out):
    name: str
    n_params: float
    source: str = ""


class Memory(_Out):
    """Per GPU, for the most loaded GPU (`stage`), in bytes, at its peak (`peak_at` says when and
    what coexists there). allocated_bytes: the tensors alive at the peak; reserved_bytes: what
    PyTorch's caching allocator holds for them (torch.cuda.max_memory_reserved); total_bytes adds
    the runtime outside the allocator (CUDA context, NCCL, workspaces) and is what must fit in
    capacity_bytes; margin_bytes = capacity − total."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    overhead_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    stage: Literal["first", "last", "middle"]
    params_per_gpu: float
    stage_rank: int = 0
    """The most loaded GPU's pipeline rank (0 for the first stage, pp − 1 for the last)."""
    stage_layers: float = 0.0
    allocated_bytes: float = 0.0
    reserved_bytes: float = 0.0
    margin_bytes: float = 0.0
    peak_at: str = ""
    framework: str = "megatron"
    # offload: host memory the plan takes per GPU (offloaded states, their host gradient buffers,
    # offloaded activations) and what the profile's host gives a GPU; fits needs both to fit
    host_bytes: float = 0.0
    host_capacity_bytes: float = 0.0

    @property
    def stage_name(self) -> str:
        """The stage as a person reads it: "first", "last" or "middle (rank r)"."""
        return f"middle (rank {self.stage_rank})" if self.stage == "middle" else self.stage


class CollectiveCall(_Out):
    """One kind of collective of a step as NCCL's tuner runs each call (explain): the
    algorithm and protocol it picks for one call of message_bytes over `ranks` ranks on `nodes`
    NVLink domains, that call's latency (NCCL's per-call constants, its steps and hops) and
    transfer (message / algorithm bandwidth) in seconds, the calls per step, and the step's
    total, calls × (latency + transfer), before any overlap. A point-to-point send or an
    all-to-all has algorithm "p2p"; DeepEP's dispatch and combine "deepep" (protocol "-", its
    whole time as transfer)."""

    name: str
    algorithm: str
    protocol: str
    ranks: float
    nodes: float
    message_bytes: float
    calls_per_step: float
    latency_s: float
    transfer_s: float
    step_s: float


class Comm(_Out):
    """Bytes one GPU sends per step, by kind of parallelism, and the link each crosses
    ("nvlink" inside the fast domain, "network" across it, "none" when the degree is 1)."""

    dp_bytes: float
    tp_bytes: float
    pp_bytes: float
    cp_bytes: float
    ep_bytes: float = 0.0  # moe: the expert all-to-all's bytes (0 without experts or at ep = 1)
    dp_link: Literal["nvlink", "network", "none"] = "none"
    tp_link: Literal["nvlink", "network", "none"] = "none"
    pp_link: Literal["nvlink", "network", "none"] = "none"
    cp_link: Literal["nvlink", "network", "none"] = "none"
    ep_link: Literal["nvlink", "network", "none"] = "none"
    # placement and links (formulas/comm.py): the bus bandwidth each group's collectives get per
    # GPU (bytes/s), the share of its link it keeps while other groups' traffic runs beside it,
    # its ranks per NVLink domain, and how busy each link is over the step
    dp_busbw_bytes_per_s: float = 0.0
    tp_busbw_bytes_per_s: float = 0.0
    pp_busbw_bytes_per_s: float = 0.0
    cp_busbw_bytes_per_s: float = 0.0
    dp_share: float = 1.0
    tp_share: float = 1.0
    pp_share: float = 1.0
    cp_share: float = 1.0
    dp_ranks_per_domain: float = 1.0
    tp_ranks_per_domain: float = 1.0
    cp_ranks_per_domain: float = 1.0
    nvlink_busy_s: float = 0.0
    network_busy_s: float = 0.0
    nvlink_utilisation: float = 0.0
    network_utilisation: float = 0.0
    busiest_link: Literal["nvlink", "network", "none"] = "none"
    # explain: each collective of the step as NCCL's tuner picks and prices each call
    collectives: list[CollectiveCall] = []


class Time(_Out):
    """Where the step's time goes (seconds), and what it buys."""

    step_s: float
    compute_s: float
    bubble_s: float
    exposed_comm_s: float
    tp_exposed_s: float
    pp_exposed_s: float
    cp_exposed_s: float
    dp_exposed_s: float
    # moe: the expert all-to-all compute does not hide; exposed_comm_s is the five groups' sum
    ep_exposed_s: float = 0.0
    optimizer_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_flops: float
    hardware_flops: float
    # MFU under the causal convention (the unmasked half of the attention square, as current
    # Megatron-Core logs it); `mfu` and `model_flops` keep the full-square convention
    mfu_causal: float = 0.0
    model_flops_causal: float = 0.0
    # offload: the step time offload adds (the offloaded optimizer step and the host-link copies
    # compute does not hide), and the bytes per step it copies each way over the host link
    offload_s: float = 0.0
    offload_d2h_bytes: float = 0.0
    offload_h2d_bytes: float = 0.0
    # the wait for the slowest of the job's GPUs, included in step_s (formulas/reliability.py)
    straggler_s: float = 0.0


class Term(_Out):
    """One line of explain: a quantity, its formula in the papers' notation, its value."""

    key: str
    symbol: str
    group: str
    unit: str
    formula: str
    value: float
    why: str


class Constant(_Out):
    """One of the profile's constants an explain formula names, in base units."""

    symbol: str
    value: float
    unit: str
    meaning: str


class Goodput(_Out):
    """The share of the wall clock that trains at this plan's size (model/goodput.py): the
    job's interruptions, its checkpoint and the Young/Daly interval, each restart's cost."""

    failures_per_gpu_hour: float  # the cluster's interruption rate per GPU (profile or flag)
    interruptions_per_day: float  # 24·N·λ_fail
    mtbf_s: float  # the job's mean time between interruptions, T_MTBF = 3600/(N·λ_fail)
    checkpoint_bytes: float  # weights + optimizer state, each parameter once
    checkpoint_write_s: float  # δ: every GPU writing its share at once
    checkpoint_interval_s: float  # τ: Young/Daly's optimum
    restart_s: float  # T_restart: relaunch + reading the checkpoint back
    fraction: float  # the goodput G: τ/(τ + δ)·(1 − (T_restart + (τ + δ)/2)/T_MTBF)


class Budget(_Out):
    """What training on train_tokens costs with this plan."""

    train_tokens: float
    days: float
    gpu_hours: float
    cost: float | None = None
    gpu_hour_price: float | None = None
    energy_mwh: float | None = None
    gpu_power_w: float | None = None
    goodput: float = 1.0  # share of the wall-clock time that trains; days and hours include the rest
    goodput_from: Literal["model", "--goodput"] = "model"  # plan.goodput, or the flag's value


class Plan(_Out):
    config: PlanConfig
    model: ModelSummary
    hardware: str
    memory: Memory
    comm: Comm
    bubble_fraction: float
    time: Time
    warnings: list[PlanWarning] = []
    terms: list[Term] = []
    goodput: Goodput | None = None  # None only for a plan built by hand (tests)
    budget: Budget | None = None
