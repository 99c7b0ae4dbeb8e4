"""From what a user asks (a model, a GPU count, some fixed or narrowed dimensions) to plans.

`PlanRequest` is the validated form of the flags `explain` and `search` share; every dimension is
a list of allowed values (one value fixes it, None leaves it open)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from ..errors import PlanError, flag_refusal
from ..formulas.choices import (
    Attention,
    ContextKind,
    Precision,
    QuantRecipe,
    Recompute,
    RecomputeModule,
    Schedule,
    ZeroStage,
)
from ..schema import HardwareProfile, ModelSpec, PlanConfig

DEFAULT_TOKENS_PER_STEP = 4 * 2**20
"""Default global batch in tokens: 4 Mi tokens (Llama 2 trained at 4M tokens per step; Llama 3
405B started at 4M), or 1 Ki tokens per GPU on large clusters (Llama 3 405B: 16M tokens on 16,384
H100, Dubey et al. 2024 Table 4), whichever is larger. gbs = tokens / seq_len, at least one."""
DEFAULT_TOKENS_PER_GPU = 2**10

DEFAULT_MBS = (1, 2, 4, 8)
# Bounds on what a request may ask: beyond any training run, and inside the range where the
# arithmetic (int64 arrays in search, float64 everywhere) stays exact and finite.
MAX_GPUS = 2**20  # a million GPUs: beyond any cluster built
MAX_DIM = MAX_GPUS  # dp, tp, pp, cp, vpp: each divides the GPU count (vpp: at most the layers)
MAX_MBS = 2**20
MAX_GBS = 2**40  # sequences per step
MAX_TOKENS_PER_STEP = 2**50
MAX_SEQ_LEN = 2**30  # tokens per sequence


Dim = Annotated[PositiveInt, Field(le=MAX_DIM)]


class PlanRequest(BaseModel):
    """The dimensions of a plan; None = open (search) or default (explain)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: PositiveInt = Field(le=MAX_GPUS)
    dp: list[Dim] | None = None
    tp: list[Dim] | None = None
    pp: list[Dim] | None = None
    cp: list[Dim] | None = None
    vpp: list[Dim] | None = None
    mbs: list[Annotated[PositiveInt, Field(le=MAX_MBS)]] | None = None
    gbs: PositiveInt | None = Field(None, le=MAX_GBS)
    tokens_per_step: PositiveInt | None = Field(None, le=MAX_TOKENS_PER_STEP)
    seq_len: PositiveInt | None = Field(None, le=MAX_SEQ_LEN)
    zero: list[ZeroStage] | None = None
    recompute: list[Recompute] | None = None
    sp: list[bool] | None = None
    schedule: list[Schedule] | None = None
    precision: Precision = Precision.BF16
    # fit: the low-precision recipe and its options, and the finer recompute levels (explain:
    # the plan's; search: every candidate's, except that full recompute is also tried with the
    # fewest layers a stage must recompute to fit, search.partial_recompute_variants)
    fp8_recipe: QuantRecipe | None = None
    fp8_param_gather: bool = False
    recompute_layers: int = Field(0, ge=0, le=2**20)
    recompute_modules: tuple[RecomputeModule, ...] | None = None
    distribute_saved_activations: bool = False
    contiguous_checkpoints: bool = False  # fit: DeepSpeed contiguous_memory_optimization
    compile_loss: bool = False  # fit: torchtitan's compile.components ["loss"]
    torchtitan_flex_ac: bool = False  # torchtitan < v0.2.1's flex path of op SAC
    recompute_group: int = Field(1, ge=1, le=2**20)  # fit: Megatron's uniform method
    grad_dtype: Literal["fp32", "bf16"] = "fp32"
    adam_moments: Literal["fp32", "bf16"] = "fp32"  # every candidate's (Megatron, ZeRO-1 only)
    attention: Attention = Attention.FLASH
    overlap_grad_reduce: bool = True
    allow_tp_across_nodes: bool = False
    framework: Literal["megatron", "torchtitan", "deepspeed"] = "megatron"
    # moe: expert parallel and expert tensor parallel degrees (None: 1 in explain; search: the
    # divisors of the routed experts, and etp 1), load imbalance, capacity factor, a2a overlap
    ep: list[Dim] | None = None
    etp: list[Dim] | None = None
    moe_imbalance: float | None = Field(None, ge=1, le=64)
    moe_forced_balance: bool = False
    moe_dispatcher: Literal["alltoall", "allgather", "deepep"] | None = None
    moe_capacity_factor: float | None = Field(None, gt=0, le=64)
    moe_a2a_overlap: bool | None = None  # None: search weighs it where Megatron runs it
    # the shared experts beside the dispatch (alltoall or deepep: parse_request refuses allgather),
    # and whether the model's multi-token-prediction modules train
    moe_shared_expert_overlap: bool = False
    moe_permute_fusion: bool = True  # Megatron --moe-permute-fusion (False: the un-fused path)
    mtp: bool = True
    # hybrid sharding: the shard group over dp (None: all of dp shards, as without HSDP; explain
    # takes one value; search a list, or "auto": dp and its divisors that fill whole NVLink
    # domains with the shard group, search.dp_shard_candidates)
    dp_shard: list[Dim] | Literal["auto"] | None = None
    # hybrid sharding by its replicas (torchtitan's data_parallel_replicate_degree): the shard
    # group is dp/r for each r that divides dp; exclusive with dp_shard
    dp_replicate: list[Dim] | None = None
    # cp-kind: the context-parallel kinds (None: the framework's default kind; "auto": search
    # tries every kind the framework runs) and the hierarchical kind's all-to-all groups (None:
    # search tries the divisors of cp whose group t·c_a fits the NVLink domain)
    cp_kind: list[ContextKind] | Literal["auto"] | None = None
    cp_a2a: list[Dim] | None = None
    # offload: fixed offload settings (explain: the plan's; search: every candidate's), or, when
    # none is given, search's `offload` mode: auto ranks, for every candidate that does not fit
    # without it, the least offload that makes it fit (to compete on speed); fit (the default)
    # ranks those only when no candidate fits without offload (they are still weighed under the
    # table); none never
    offload_optimizer: float | None = Field(None, ge=0, le=1)
    offload_params: bool | None = None
    offload_activations: int | None = Field(None, ge=0, le=2**20)
    offload: Literal["fit", "auto", "none"] = "fit"
    # goodput: the cluster's figures where the user knows them better than the profile
    failures_per_gpu_hour: float | None = Field(None, gt=0, le=1)
    restart_s: float | None = Field(None, ge=0, le=86400)
    storage_write_gb_per_s_per_gpu: float | None = Field(None, gt=0, le=1e4)

    def cluster(self, hw: HardwareProfile) -> HardwareProfile:
        """goodput: the profile with the request's interruption rate, restart time and
        checkpoint write bandwidth in place of its own (those given)."""
        rel = {k: v for k, v in (("failures_per_gpu_hour", self.failures_per_gpu_hour),
                                 ("restart_s", self.restart_s)) if v is not None}
        update = {}
        if rel:
            update["reliability"] = hw.reliability.model_copy(update=rel)
        if self.storage_write_gb_per_s_per_gpu is not None:
            update["storage"] = hw.checkpoint_storage.model_copy(update={
                "write_gb_per_s_per_gpu": self.storage_write_gb_per_s_per_gpu})
        return hw.model_copy(update=update) if update else hw

    def fixed_offload(self) -> dict:
        """offload: the PlanConfig offload fields the request fixes (--offload-params implies the
        whole optimizer: FSDP2 and ZeRO-3 offload_param move it with the parameters)."""
        params = bool(self.offload_params)
        fraction = self.offload_optimizer
        if fraction is None:
            fraction = 1.0 if params else 0.0
        if params and fraction != 1:
            raise PlanError(f"--offload-params moves the optimizer states to the host too: "
                            f"--offload-optimizer must be 1 (or left out), got {fraction:g}")
        return dict(offload_optimizer=fraction, offload_params=params,
                    offload_activations=self.offload_activations or 0)

    @property
    def offload_fixed(self) -> bool:
        """offload: whether any offload flag was given (then search tries no other offload)."""
        return (self.offload_optimizer is not None or self.offload_params is not None
                or self.offload_activations is not None)

    def seq(self, model: ModelSpec) -> int:
        return self.seq_len or model.seq_len

    def global_batch(self, model: ModelSpec) -> int:
        """--gbs, else --tokens-per-step / seq_len, else the default: max(4 Mi tokens,
        1 Ki tokens per GPU) / seq_len."""
        if self.gbs is not None:
            return self.gbs
        tokens = self.tokens_per_step or max(DEFAULT_TOKENS_PER_STEP,
                                             DEFAULT_TOKENS_PER_GPU * self.gpus)
        return max(1, tokens // self.seq(model))


def precision_settings(req: PlanRequest) -> dict:
    """fit: the PlanConfig fields of the request's recipe: the fp8 recipe, and torchtitan's
    compiled loss."""
    return dict(fp8_recipe=req.fp8_recipe, fp8_param_gather=req.fp8_param_gather,
                compile_loss=req.compile_loss, torchtitan_flex_ac=req.torchtitan_flex_ac,
                adam_moments=req.adam_moments)


def recompute_settings(req: PlanRequest, recompute: Recompute, layers: int | None = None,
                       sp: bool = False, split: bool = False) -> dict:
    """fit: the finer recompute fields that apply to one recompute level (a partial layer count
    and distributed checkpoints to full recompute, the modules to selective); `layers`
    overrides the request's count; a candidate with sequence parallelism (`sp`) has nothing to
    distribute; `split`: the search split this candidate's checkpoints over the tp ranks itself
    (DeepSpeed partition_activations, search/recompute.py)."""
    n = req.recompute_layers if layers is None else layers
    return dict(recompute_layers=n if recompute is Recompute.FULL else 0,
                recompute_group=req.recompute_group if recompute is Recompute.FULL else 1,
                distribute_saved_activations=((req.distribute_saved_activations or split)
                                              and recompute is Recompute.FULL and not sp),
                contiguous_checkpoints=(req.contiguous_checkpoints
                                        and req.distribute_saved_activations
                                        and recompute is Recompute.FULL and not sp),
                recompute_modules=(req.recompute_modules if recompute is Recompute.SELECTIVE
                                   else None))


def _one(values, name: str, default):
    if values is None:
        return default
    if len(values) != 1:
        raise PlanError(f"--{name} takes one value for explain (got {len(values)}); "
                        "give lists to search")
    return values[0]


def explain_configs(model: ModelSpec, hw: HardwareProfile, req: PlanRequest) -> list[PlanConfig]:
    """The plan(s) explain evaluates: one, or several when --zero/--recompute are `auto`
    (req.zero / req.recompute None means auto only when the caller says so: see cli)."""
    tp = _one(req.tp, "tp", 1)
    pp = _one(req.pp, "pp", 1)
    cp = _one(req.cp, "cp", 1)
    vpp = _one(req.vpp, "vpp", 1)
    mbs = _one(req.mbs, "mbs", 1)
    inner = tp * pp * cp
    if req.gpus % inner:
        raise PlanError(f"tp·pp·cp = {tp}·{pp}·{cp} = {inner} must divide --gpus {req.gpus}")
    dp = _one(req.dp, "dp", req.gpus // inner)
    if dp * inner != req.gpus:
        raise PlanError(f"dp·tp·pp·cp = {dp}·{tp}·{pp}·{cp} = {dp * inner} must equal "
                        f"--gpus {req.gpus}")
    gbs = req.global_batch(model)
    if gbs % (dp * mbs):
        raise PlanError(f"global batch {gbs} must be divisible by dp·mbs = {dp}·{mbs} = "
                        f"{dp * mbs} (choose --gbs as a multiple of {dp * mbs})")
    default_schedule = Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B
    schedule = _one(req.schedule, "schedule", default_schedule)
    sp = _one(req.sp, "sp", tp > 1)
    from ..frameworks import get as framework_named

    supported = framework_named(req.framework).zero_stages
    zeros = req.zero if req.zero is not None else list(supported)
    recomputes = req.recompute if req.recompute is not None else list(Recompute)
    if req.distribute_saved_activations and (sp or Recompute.FULL not in recomputes):  # fit
        raise PlanError("--distribute-saved-activations splits full recompute's checkpoints "
                        "over the tp ranks: it needs --recompute full and --no-sp (sequence "
                        "parallelism splits them already; transformer_config.py l.1934 @ "
                        "d98e8a6)")
    if req.contiguous_checkpoints and not req.distribute_saved_activations:  # fit
        raise PlanError("--contiguous-checkpoints copies partitioned checkpoints into buffers "
                        "allocated ahead: it needs --distribute-saved-activations (DeepSpeed's "
                        "contiguous_memory_optimization only with partition_activations)")
    configs = [_config(dp=dp, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, n_micro=gbs // (dp * mbs),
                       gbs=gbs, seq_len=req.seq(model), zero_stage=z, recompute=r,
                       sequence_parallel=sp, schedule=schedule, precision=req.precision,
                       **precision_settings(req), **recompute_settings(req, r),  # fit
                       grad_dtype=req.grad_dtype, attention=req.attention,
                       overlap_grad_reduce=req.overlap_grad_reduce, framework=req.framework,
                       dp_shard=_one_dp_shard(req, dp), **moe_settings(req),
                       **cp_kind_settings(req),  # cp-kind
                       **req.fixed_offload())  # offload
               for z in zeros for r in recomputes]
    if req.offload_fixed and len(configs) > 1:
        # offload: with --zero/--recompute auto, the settings the framework offloads under (all,
        # if none: the first then says why)
        from ..model import constraints

        framework = framework_named(req.framework)
        runs = [c for c in configs if framework.broken(model, constraints.of(c)) is None]
        configs = runs or configs
    return configs


CONFIG_FLAGS = {"zero_stage": "--zero", "sequence_parallel": "--sp", "recompute": "--recompute",
                "precision": "--precision"}
"""PlanConfig's names whose flag is spelled otherwise, and the plain words its validators use
for a flag (errors.in_flag_names)."""


def _config(**fields) -> PlanConfig:
    """One of explain's plans from the flags: PlanConfig's refusal of values that contradict
    each other (its validators) as a PlanError in the flags' names, one line, not pydantic's
    ValidationError (which the command line would report as a bug)."""
    try:
        return PlanConfig(**fields)
    except ValidationError as err:
        raise PlanError(flag_refusal(err, PlanConfig.model_fields, CONFIG_FLAGS)) from None


def cp_kind_settings(req: PlanRequest) -> dict:
    """cp-kind: explain's cp_kind and cp_a2a: one value each (a --cp-a2a alone implies the
    hierarchical kind); whether they fit cp is PlanConfig's check (schema.cp_kind_problem),
    refused in the flags' names (_config)."""
    if req.cp_kind == "auto":
        raise PlanError("--cp-kind auto is for search; explain takes one kind (ring, a2a or "
                        "hierarchical)")
    kind = _one(req.cp_kind, "cp-kind", None)
    cp_a2a = _one(req.cp_a2a, "cp-a2a", None)
    if kind is None and cp_a2a is not None:
        kind = ContextKind.HIERARCHICAL
    return dict(cp_kind=kind, cp_a2a=cp_a2a)


def _one_dp_shard(req: PlanRequest, dp: int) -> int | None:
    """explain's shard group: --dp-shard's one value (None: no hybrid sharding); it must divide
    dp."""
    if req.dp_shard == "auto":
        raise PlanError("--dp-shard auto is for search; explain takes one value (a divisor of dp)")
    replicas = _one(req.dp_replicate, "dp-replicate", None)
    if replicas is not None:
        if dp % replicas:
            raise PlanError(f"--dp-replicate {replicas} must divide dp = {dp} (each replica is "
                            f"a shard group of dp/dp_replicate ranks)")
        return dp // replicas
    shard = _one(req.dp_shard, "dp-shard", None)
    if shard is not None and dp % shard:
        raise PlanError(f"--dp-shard {shard} must divide dp = {dp} (dp_replicate = dp/dp_shard "
                        "replicas of the shard group)")
    return shard


def moe_settings(req: PlanRequest, ep: int | None = None, etp: int | None = None,
                 deepep: int | None = None, overlap: int | None = None) -> dict:
    """The PlanConfig fields of expert parallelism (moe): ep and etp given, or the request's one
    value each (explain; default 1), the load settings, and the dispatcher (a search candidate's
    `deepep` column, else the request's)."""
    dispatcher = req.moe_dispatcher
    if deepep is not None:
        dispatcher = "deepep" if deepep else (None if dispatcher == "deepep" else dispatcher)
    return dict(ep=ep if ep is not None else _one(req.ep, "ep", 1),
                etp=etp if etp is not None else _one(req.etp, "etp", 1),
                moe_imbalance=req.moe_imbalance, moe_capacity_factor=req.moe_capacity_factor,
                moe_a2a_overlap=(bool(req.moe_a2a_overlap) if overlap is None else bool(overlap)),
                moe_forced_balance=req.moe_forced_balance,
                moe_dispatcher=dispatcher,
                moe_shared_expert_overlap=req.moe_shared_expert_overlap, mtp=req.mtp,
                moe_permute_fusion=req.moe_permute_fusion)
