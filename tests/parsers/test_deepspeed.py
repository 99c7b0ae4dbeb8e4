"""`--emit deepspeed` fed to DeepSpeed 0.19.8's own `DeepSpeedConfig`, with a
Megatron-DeepSpeed-style mpu (data-parallel world dp; tensor, pipeline and Ulysses sequence
groups beside it) on torch's fake process-group backend of dp·tp·pp·cp ranks.

Compared with the plan (`--json`): the batch triple DeepSpeed checks (train_batch_size =
micro-batch × gradient accumulation × data-parallel world), the ZeRO stage, the 16-bit mode,
offload devices and ratio; and the Megatron-DeepSpeed launch arguments the emitter gives in its
notes (tensor, pipeline, Ulysses sizes, batch, ZeRO stage); and the pipeline engine's layer
partition (partition_balanced over transformer layers, as Megatron-DeepSpeed asks) against the
layers plan3d costed.

moe: the AutoEP rows' "expert_parallel" section through DeepSpeed's own parse_autoep_config and
validate_autoep_config (the folding of ep over the world, etp, ZeRO stage, dispatcher), and its
post-detection check with the model's experts (ep divides them); the preset named must be one
DeepSpeed registers.

Stubs: none (DeepSpeed's config needs no GPU). Megatron-DeepSpeed itself is not on the package
index: its arguments are checked by name and value against the plan, not parsed."""

from __future__ import annotations

import json
import shlex

import pytest

from .conftest import emitted, launch_json, plan_json
from .matrix import ROWS

torch = pytest.importorskip("torch", reason="the parser suite needs torch (pip install torch)")
pytest.importorskip("deepspeed", reason="needs deepspeed (pip install deepspeed==0.19.8)")

DS_ROWS = [(rid, args) for rid, args, fmts in ROWS if "deepspeed" in fmts]
# moe: AutoEP rows (ep > 1) run a Hugging Face model: no Megatron-DeepSpeed arguments
AUTOEP_ROWS = [(rid, args) for rid, args in DS_ROWS if " --ep " in args]
MEGATRON_DS_ROWS = [r for r in DS_ROWS if r not in AUTOEP_ROWS]


class MegatronDeepSpeedMpu:
    """What DeepSpeed asks of Megatron-DeepSpeed's mpu (megatron/core/parallel_state.py there):
    the group sizes, rank 0."""

    def __init__(self, dp: int, tp: int, pp: int, sp: int):
        self.dp, self.tp, self.pp, self.sp = dp, tp, pp, sp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_world_size(self):
        return self.tp

    get_tensor_model_parallel_world_size = get_model_parallel_world_size

    def get_pipe_parallel_world_size(self):
        return self.pp

    def get_sequence_parallel_world_size(self):
        return self.sp

    def get_data_parallel_rank(self):
        return 0

    def get_tensor_model_parallel_rank(self):  # fit: deepspeed.checkpointing.configure
        return 0

    def get_tensor_model_parallel_group(self):  # read by the checkpoints' gathers only
        return None


@pytest.fixture(scope="module")
def ds_comm():
    """DeepSpeed's comm layer over torch's fake backend, sized per test (re-initialised)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def init(world: int):
        import deepspeed.comm as dscomm

        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
        dscomm.init_distributed(dist_backend="fake", auto_mpi_discovery=False)

    yield init
    if dist.is_initialized():
        dist.destroy_process_group()


def _megatron_deepspeed_args(args: str) -> dict[str, str | None]:
    note = next(n for n in launch_json(args, "deepspeed")["notes"]
                if n.startswith("Megatron-DeepSpeed args: "))
    tokens = shlex.split(note.removeprefix("Megatron-DeepSpeed args: "))
    out: dict[str, str | None] = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            out[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return out


@pytest.mark.parametrize("rid,args", DS_ROWS, ids=[r for r, _ in DS_ROWS])
def test_deepspeed_config_matches_the_plan(rid, args, ds_comm):
    from deepspeed.runtime.config import DeepSpeedConfig

    c = plan_json(args)["config"]
    ds_comm(c["dp"] * c["tp"] * c["pp"] * c["cp"])
    cfg = DeepSpeedConfig(json.loads(emitted(args, "deepspeed")),
                          mpu=MegatronDeepSpeedMpu(c["dp"], c["tp"], c["pp"], c["cp"]))
    assert cfg.world_size == c["dp"]
    # DeepSpeed's own check: train_batch_size = micro × accumulation × data-parallel world
    assert (cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu,
            cfg.gradient_accumulation_steps) == (c["gbs"], c["mbs"], c["n_micro"])
    assert cfg.zero_optimization_stage == c["zero_stage"]
    assert cfg.bfloat16_config.enabled == (c["precision"] == "bf16")
    assert cfg.float16_config.enabled == (c["precision"] == "fp16")
    zero = cfg.zero_config
    if c["offload_optimizer"]:
        assert zero.offload_optimizer is not None
        assert str(zero.offload_optimizer.device).endswith("cpu")
        assert zero.offload_optimizer.ratio == c["offload_optimizer"]
    else:
        assert zero.offload_optimizer is None
    assert (zero.offload_param is not None) == bool(c["offload_params"])
    # the buckets and ZeRO-3 thresholds DeepSpeed reads are the ones plan3d costed
    # (frameworks/deepspeed.py; DeepSpeedZeroConfig's fields at 0.19.8)
    from planner.frameworks import deepspeed as DS

    if c["zero_stage"] >= 1:
        assert zero.reduce_bucket_size == DS.REDUCE_BUCKET_ELEMENTS
        assert zero.allgather_bucket_size == DS.ALLGATHER_BUCKET_ELEMENTS
    if c["zero_stage"] == 3:
        assert (zero.prefetch_bucket_size, zero.param_persistence_threshold,
                zero.max_live_parameters, zero.max_reuse_distance) == (
            DS.PREFETCH_BUCKET_ELEMENTS, DS.PARAM_PERSISTENCE_THRESHOLD,
            DS.MAX_LIVE_PARAMETERS, DS.MAX_REUSE_DISTANCE)


@pytest.mark.parametrize("rid,args", MEGATRON_DS_ROWS, ids=[r for r, _ in MEGATRON_DS_ROWS])
def test_megatron_deepspeed_arguments_match_the_plan(rid, args):
    c = plan_json(args)["config"]
    a = _megatron_deepspeed_args(args)
    assert int(a["--tensor-model-parallel-size"]) == c["tp"]
    assert int(a["--pipeline-model-parallel-size"]) == c["pp"]
    assert ("--no-pipeline-parallel" in a) == (c["pp"] == 1)
    assert int(a.get("--ds-sequence-parallel-size") or 1) == c["cp"]
    assert (int(a["--micro-batch-size"]), int(a["--global-batch-size"])) == (c["mbs"], c["gbs"])
    assert int(a["--zero-stage"]) == c["zero_stage"]
    assert int(a["--seq-length"]) == c["seq_len"]
    assert ("--fp16" in a) == (c["precision"] == "fp16")


@pytest.mark.parametrize("rid,args", [r for r in DS_ROWS if " --pp 1 " not in r[1] + " "],
                         ids=[r for r, a in DS_ROWS if " --pp 1 " not in a + " "])
def test_pipeline_engine_places_what_plan3d_costed(rid, args):
    """Megatron-DeepSpeed's GPTModelPipe partitions by 'type:transformer' (megatron/model/
    gpt_model.py there): DeepSpeed's PipelineModule weighs each transformer layer 1, the rest 0,
    and splits by deepspeed.runtime.utils.partition_balanced; no stage over plan3d's cost."""
    from deepspeed.runtime.utils import partition_balanced

    from planner.catalog import load_model

    plan = plan_json(args)
    c = plan["config"]
    n_layers = load_model(args.split("--model ")[1].split()[0]).n_layers
    weights = [0] + [1] * n_layers + [0, 0]  # embedding, the layers, final norm, head
    bounds = partition_balanced(weights, c["pp"])
    layers = [sum(weights[bounds[i]:bounds[i + 1]]) for i in range(c["pp"])]
    assert sum(layers) == n_layers
    assert max(layers) <= plan["memory"]["stage_layers"], (layers, plan["memory"]["stage_layers"])


def _checkpointing_after_configure(cfg_json: str, c: dict, ds_comm):
    """DeepSpeed's activation-checkpointing module as configure() leaves it for this JSON (its
    own checks: contiguous_memory_optimization only with partition_activations and a
    number_checkpoints)."""
    import deepspeed.runtime.activation_checkpointing.checkpointing as ckpt

    ds_comm(c["dp"] * c["tp"] * c["pp"] * c["cp"])
    ckpt.configure(MegatronDeepSpeedMpu(c["dp"], c["tp"], c["pp"], c["cp"]),
                   deepspeed_config=json.loads(cfg_json))
    return ckpt


@pytest.mark.parametrize("rid,args", MEGATRON_DS_ROWS, ids=[r for r, _ in MEGATRON_DS_ROWS])
def test_activation_checkpointing_matches_the_plan(rid, args, ds_comm):
    """fit: the activation_checkpointing block, read by DeepSpeed's own config class and
    configure(): partition_activations is --distribute-saved-activations, cpu_checkpointing is
    --offload-activations (every checkpoint), both present only under full recompute."""
    from deepspeed.runtime.activation_checkpointing.config import (
        DeepSpeedActivationCheckpointingConfig,
    )

    c = plan_json(args)["config"]
    raw = json.loads(emitted(args, "deepspeed"))
    assert ("activation_checkpointing" in raw) == (c["recompute"] == "full")
    ac = DeepSpeedActivationCheckpointingConfig(raw)
    assert ac.partition_activations == bool(c["distribute_saved_activations"])
    assert ac.cpu_checkpointing == (c["offload_activations"] > 0)
    assert ac.contiguous_memory_optimization == c["contiguous_checkpoints"]
    if c["recompute"] == "full":
        ckpt = _checkpointing_after_configure(json.dumps(raw), c, ds_comm)
        assert (ckpt.PARTITION_ACTIVATIONS, ckpt.CPU_CHECKPOINT, ckpt.CONTIGUOUS_CHECKPOINTING) == (
            ac.partition_activations, ac.cpu_checkpointing, ac.contiguous_memory_optimization)
        a = _megatron_deepspeed_args(args)  # Megatron-DeepSpeed's flags override the JSON's
        assert ("--partition-activations" in a) == ac.partition_activations
        assert ("--checkpoint-in-cpu" in a) == ac.cpu_checkpointing
        assert ("--contigious-checkpointing" in a) == ac.contiguous_memory_optimization


def test_contiguous_checkpoints_pass_configure(ds_comm):
    """fit: contiguous_checkpoints writes contiguous_memory_optimization with
    number_checkpoints = ⌈L/g⌉ = 32 for Llama 3.1 8B, which configure() accepts (it asserts
    partitioned activations and a count), and plan3d refuses it where the first stage's
    checkpoints in flight outnumber it (uneven stages: 4 stages of ⌈32/3⌉ = 11 > 32/3)."""
    from planner.catalog import load_model
    from planner.errors import PlanError
    from planner.frameworks.deepspeed import FRAMEWORK
    from planner.schema import PlanConfig

    args = [a for r, a in DS_ROWS if r == "ds-ac-partition-cpu-8b"][0]
    c = PlanConfig(**{**plan_json(args)["config"], "contiguous_checkpoints": True})
    model = load_model("llama-3.1-8b")
    raw = json.loads(FRAMEWORK.emitters["deepspeed"](c, model).text)
    assert raw["activation_checkpointing"]["contiguous_memory_optimization"] is True
    assert raw["activation_checkpointing"]["number_checkpoints"] == 32
    ckpt = _checkpointing_after_configure(json.dumps(raw), c.model_dump(), ds_comm)
    assert (ckpt.CONTIGUOUS_CHECKPOINTING, ckpt.num_layers) == (True, 32)
    uneven = c.model_copy(update={"pp": 3, "dp": c.dp * 2 // 3 or 1})
    with pytest.raises(PlanError, match="number_checkpoints"):
        FRAMEWORK.emitters["deepspeed"](uneven, model)


@pytest.mark.parametrize("rid,args", AUTOEP_ROWS, ids=[r for r, _ in AUTOEP_ROWS])
def test_autoep_section_passes_deepspeeds_validation(rid, args, ds_comm):
    """moe: what DeepSpeed checks of the expert_parallel section before it builds groups."""
    from deepspeed.module_inject.auto_ep_config import (
        PRESET_MODELS,
        parse_autoep_config,
        validate_autoep_config,
        validate_autoep_post_detection,
    )
    from deepspeed.module_inject.auto_ep_folding import build_folding_spec
    from deepspeed.runtime.config import DeepSpeedConfig

    from planner.catalog import load_model

    c = plan_json(args)["config"]
    world = c["dp"] * c["tp"] * c["pp"] * c["cp"]
    ds_comm(world)
    raw = json.loads(emitted(args, "deepspeed"))
    cfg = DeepSpeedConfig(raw, mpu=MegatronDeepSpeedMpu(c["dp"], c["tp"], c["pp"], c["cp"]))
    ep_cfg = cfg.expert_parallel_config  # DeepSpeedConfig parsed the section itself
    assert ep_cfg.enabled and ep_cfg.autoep_size == c["ep"]
    assert ep_cfg.expert_tensor_parallel_size == c["etp"] == 1
    assert ep_cfg.preset_model in PRESET_MODELS
    assert (ep_cfg.comm_backend == "deepep") == (c["moe_dispatcher"] == "deepep")
    validate_autoep_config(parse_autoep_config(raw["expert_parallel"]), world_size=world,
                           pp_size=c["pp"], tp_size=c["tp"], sp_size=c["cp"],
                           zero_stage=c["zero_stage"],
                           zero_offload_optimizer=bool(c["offload_optimizer"]),
                           zero_offload_param=bool(c["offload_params"]))
    spec = build_folding_spec(world_size=world, pp_size=c["pp"], tp_size=c["tp"],
                              ep_size=c["ep"], etp_size=c["etp"])
    # DeepSpeed's expert-data-parallel group is the one plan3d reduces expert gradients over
    assert spec.edp_size == c["dp"] * c["tp"] * c["cp"] // (c["ep"] * c["etp"])
    model = load_model(args.split("--model ")[1].split()[0])
    layer = _moe_layer_spec(model)
    validate_autoep_post_detection(parse_autoep_config(raw["expert_parallel"]), [layer])


def _moe_layer_spec(model):
    """The MoE layer AutoEP would detect in the Hugging Face model, as far as its post-detection
    check reads it (experts, top-k, widths)."""
    from deepspeed.module_inject.auto_ep_config import MoELayerSpec

    return MoELayerSpec(
        moe_module_name="model.layers.0.mlp", model_family="plan3d", router_name="gate",
        experts_name="experts", expert_storage="module_list", expert_w1_name="gate_proj",
        expert_w2_name="down_proj", expert_w3_name="up_proj", num_experts=model.n_experts,
        top_k=model.top_k, hidden_size=model.hidden, ffn_hidden_size=model.expert_ffn,
        score_func="softmax", score_apply="post", route_norm=True, gate_bias=False,
        return_router_logits=False, router_logits_capture_target="none",
        router_logits_capture_index=None, router_logits_capture_layer_name=None,
        has_shared_experts=bool(model.n_shared_experts), shared_experts_name="")
