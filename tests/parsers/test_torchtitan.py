"""`--emit torchtitan` fed to the installed torchtitan's own configuration loading, ParallelDims,
pipeline split and schedule classes, for each release plan3d writes for: 0.3 (config registry
with `--section.key` overrides, through torchtitan.config.manager.ConfigManager) and 0.2 (a TOML
job config, `--job.config_file`, through the same class of that release). CI runs this module
once with torchtitan 0.3.0 and once with 0.2.2 (.ci/run).

Compared with the plan (`--json`): data-parallel replicate × shard, TP, PP, CP degrees and the
world size (ParallelDims validates their product); micro-batches and gradient accumulation from
the batch keys; the stages torchtitan builds and, rank by rank, the layers it places (none over
what plan3d costed, ⌈L/S⌉ per stage); the schedule class; and the model the registry entry
builds, field by field against plan3d's model and, built on the meta device, its parameter count
against plan3d's (torchtitan does not pad the vocabulary).

Stubs: torchtitan 0.3's float8 converter asks the GPU for SM 8.9 when the 405B registry entry
is loaded (components/quantization/float8.py `has_cuda_capability`): answered yes. The model is
built on the meta device (no GPU); the device mesh is not built. The
stage count for 0.2 uses that release's documented formula (pipeline_parallel.py computes it
inside pipeline_llm, which needs a model and a mesh), the split itself is its own function."""

from __future__ import annotations

import importlib.metadata
import shlex

import pytest

from .conftest import cli, emitted, model_of, plan_json
from .matrix import ROWS

torch = pytest.importorskip("torch", reason="the parser suite needs torch (pip install torch)")
pytest.importorskip("triton", reason="torchtitan (0.2.2 and 0.3.0) imports triton at import")
pytest.importorskip("torchtitan", reason="needs torchtitan (pip install torchtitan==0.3.0, or "
                    "0.2.2 for the TOML form)")

VERSION = importlib.metadata.version("torchtitan")
SHORT = ".".join(VERSION.split(".")[:2])
if SHORT not in ("0.2", "0.3"):
    pytest.skip(f"torchtitan {VERSION}: plan3d writes for 0.2 and 0.3", allow_module_level=True)

TITAN_ROWS = [(rid, args) for rid, args, fmts in ROWS if "torchtitan" in fmts]
FORMAT = "torchtitan" if SHORT == "0.3" else "torchtitan@0.2"


def load(args: str, tmp_path):
    """The emitted settings through this release's ConfigManager."""
    from torchtitan.config.manager import ConfigManager

    text = emitted(args, FORMAT)
    if SHORT == "0.3":
        import torchtitan.components.quantization.float8 as float8

        with pytest.MonkeyPatch.context() as mp:  # the GPU query of float8 entries (405B)
            mp.setattr(float8, "has_cuda_capability", lambda *a: True)
            return ConfigManager().parse_args(shlex.split(text.replace("\\\n", " ")))
    path = tmp_path / "job.toml"
    path.write_text(text)
    return ConfigManager().parse_args(["--job.config_file", str(path)])


def _expressible(rid: str):
    if SHORT == "0.3" and "fp8-70b" in rid:
        pytest.skip("float8 is a registry model converter in 0.3 (refused with the reason: "
                    "test_fp8_is_refused_for_0_3)")


def parallel_dims(cfg, world: int):
    from torchtitan.distributed.parallel_dims import ParallelDims

    p = cfg.parallelism
    if SHORT == "0.3":
        return ParallelDims.from_config(p, world)
    return ParallelDims(dp_replicate=p.data_parallel_replicate_degree,
                        dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
                        tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                        ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree,
                        world_size=world)


def model_config(cfg):
    """(the model's config object, its layer count) as the registry entry builds it."""
    if SHORT == "0.3":
        return cfg.model_spec.model, len(cfg.model_spec.model.layers)
    from torchtitan.protocols.train_spec import get_train_spec

    args = get_train_spec(cfg.model.name).model_args[cfg.model.flavor]
    return args, args.n_layers


@pytest.mark.parametrize("rid,args", TITAN_ROWS, ids=[r for r, _ in TITAN_ROWS])
def test_config_loads_and_matches_the_plan(rid, args, tmp_path):
    _expressible(rid)
    plan = plan_json(args)
    c = plan["config"]
    cfg = load(args, tmp_path)
    p, t = cfg.parallelism, cfg.training
    world = c["dp"] * c["tp"] * c["pp"] * c["cp"]
    dims = parallel_dims(cfg, world)  # validates dp_replicate·dp_shard·cp·tp·pp = world
    assert (dims.dp_replicate * dims.dp_shard, dims.tp, dims.pp, dims.cp) == (
        c["dp"], c["tp"], c["pp"], c["cp"])
    assert dims.world_size == world
    if c["dp_shard"] is not None:
        assert dims.dp_shard == c["dp_shard"]
    assert t.seq_len == c["seq_len"] and t.global_batch_size == c["gbs"]
    accumulation = t.global_batch_size // (t.local_batch_size * c["dp"])
    if c["pp"] > 1:
        assert t.local_batch_size % p.pipeline_parallel_microbatch_size == 0
        assert (t.local_batch_size // p.pipeline_parallel_microbatch_size, accumulation) == (
            c["n_micro"], 1)
        assert p.pipeline_parallel_microbatch_size == c["mbs"]
    else:
        assert (t.local_batch_size, accumulation) == (c["mbs"], c["n_micro"])
    assert t.enable_cpu_offload == bool(c["offload_params"])
    # fit: the loss compiled exactly where the plan costs it so (--compile-loss), the model not
    # beyond what a float8 registry entry compiles for its converter
    assert (cfg.compile.enable and "loss" in cfg.compile.components) == c["compile_loss"]


def _stage_count(cfg, n_layers: int, dims) -> int:
    p = cfg.parallelism
    if p.module_fqns_per_model_part is not None:
        return len(p.module_fqns_per_model_part)
    if SHORT == "0.3":
        from torchtitan.distributed.pipeline_parallel import _get_pipeline_metadata

        stages, *_ = _get_pipeline_metadata(dims, p, cfg.model_spec.model)
        return stages
    # 0.2.2 pipeline_parallel.py pipeline_llm: ⌈(L + first_less + last_less)/layers_per_stage⌉
    assert p.pipeline_parallel_layers_per_stage is not None
    return -(-(n_layers + p.pipeline_parallel_first_stage_less_layers
               + p.pipeline_parallel_last_stage_less_layers)
             // p.pipeline_parallel_layers_per_stage)


def _fqns(cfg, stages: int, n_layers: int) -> list[list[str]]:
    p = cfg.parallelism
    if p.module_fqns_per_model_part is not None:
        return p.module_fqns_per_model_part
    import torchtitan.distributed.pipeline_parallel as pp_mod

    split = getattr(pp_mod, "_generate_llm_fqn_per_model_part", None) or \
        pp_mod.generate_llm_fqn_per_model_part
    return split(stages, n_layers, p.pipeline_parallel_first_stage_less_layers,
                 p.pipeline_parallel_last_stage_less_layers)


def _rank_stages(rank: int, pp: int, schedule: str, stages: int) -> tuple[int, ...]:
    if SHORT == "0.3":
        from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

        return _get_pp_rank_to_stage_indices_mapping(rank, pp, schedule, stages)
    # 0.2.2 pipeline_module_split._get_stage_indices: the same looped / V mapping, inline
    from torch.distributed.pipelining.schedules import (
        ScheduleDualPipeV,
        ScheduleZBVZeroBubble,
        get_schedule_class,
    )

    if get_schedule_class(schedule) in (ScheduleZBVZeroBubble, ScheduleDualPipeV):
        return (rank, stages - 1 - rank)
    return tuple(rank + s * pp for s in range(stages // pp))


PIPELINED = [(rid, args) for rid, args in TITAN_ROWS if " --pp 1 " not in args + " "]


@pytest.mark.parametrize("rid,args", PIPELINED, ids=[r for r, _ in PIPELINED])
def test_pipeline_places_what_plan3d_costed(rid, args, tmp_path):
    """Rank by rank: the layers torchtitan places never exceed plan3d's costed stage."""
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle, get_schedule_class

    _expressible(rid)
    plan = plan_json(args)
    c = plan["config"]
    cfg = load(args, tmp_path)
    dims = parallel_dims(cfg, c["dp"] * c["tp"] * c["pp"] * c["cp"])
    _, n_layers = model_config(cfg)
    schedule = cfg.parallelism.pipeline_parallel_schedule
    single = issubclass(get_schedule_class(schedule), PipelineScheduleSingle)
    stages = _stage_count(cfg, n_layers, dims)
    v_shape = c["schedule"] in ("zbv", "dualpipev")
    assert stages == c["pp"] * (2 if v_shape else c["vpp"])
    assert single == (stages == c["pp"])
    parts = _fqns(cfg, stages, n_layers)
    layers = [sum(name.startswith("layers.") for name in part) for part in parts]
    assert sum(layers) == n_layers
    by_rank = [sum(layers[s] for s in _rank_stages(r, c["pp"], schedule, stages))
               for r in range(c["pp"])]
    assert max(by_rank) <= plan["memory"]["stage_layers"], (by_rank, plan["memory"])
    assert max(layers) <= -(-n_layers // stages)


@pytest.mark.parametrize("rid,args", TITAN_ROWS, ids=[r for r, _ in TITAN_ROWS])
def test_registry_builds_the_planned_model(rid, args, tmp_path):
    """The registry entry's model, field by field, and its parameters on the meta device."""
    from planner.catalog import load_model

    _expressible(rid)
    model = load_model(model_of(args))
    cfg = load(args, tmp_path)
    built, n_layers = model_config(cfg)
    assert n_layers == model.n_layers
    if SHORT == "0.3":
        layer = built.layers[0]
        rope = layer.attention.rope
        assert (built.dim, built.vocab_size) == (model.hidden, model.vocab)
        assert (layer.attention.n_heads, layer.attention.n_kv_heads) == (model.n_heads,
                                                                         model.kv_heads)
        assert layer.feed_forward.w1.out_features == model.ffn
        assert layer.attention_norm.eps == model.norm_eps
        assert rope.theta == model.rope_theta
        assert (rope.scaling == "llama") == (model.rope_scaling == "llama3")
        assert (rope.scaling_factor, rope.low_freq_factor, rope.high_freq_factor,
                rope.original_max_position_embeddings) == (
            model.rope_factor, model.rope_low_freq_factor, model.rope_high_freq_factor,
            model.rope_original_max_positions)
        with torch.device("meta"):
            module = built.build()
    else:
        assert (built.dim, built.vocab_size, built.n_heads, built.n_kv_heads) == (
            model.hidden, model.vocab, model.n_heads, model.kv_heads)
        assert built.norm_eps == model.norm_eps and built.rope_theta == model.rope_theta
        scaling = built.rope_scaling_args
        assert (scaling.scaling_factor, scaling.low_freq_factor, scaling.high_freq_factor,
                scaling.original_max_position_embeddings) == (
            model.rope_factor, model.rope_low_freq_factor, model.rope_high_freq_factor,
            model.rope_original_max_positions)
        from torchtitan.protocols.train_spec import get_train_spec

        with torch.device("meta"):
            module = get_train_spec(cfg.model.name).model_cls(built)
    count = sum(p.numel() for p in module.parameters())
    assert count == plan_json(args)["model"]["n_params"]


def test_fp8_is_refused_for_0_3():
    """0.3 has no command-line key for the float8 converter: refused, naming @0.2."""
    row = next(a for r, a, _ in ROWS if r == "titan-fp8-70b")
    out = cli("explain", *shlex.split(row), "--emit", "torchtitan")
    assert out.returncode != 0 and out.stdout == ""
    assert "torchtitan@0.2" in out.stderr


def test_the_moe_dispatcher_is_what_this_release_builds(tmp_path):
    """moe (issue 23): torchtitan 0.3.0 picks the token dispatcher inside model_registry and
    keeps model_spec off the command line, so its qwen3_30b_a3b and deepseek_v3_671b entries
    build the all-to-all and plan3d refuses DeepEP for them; 0.2.2 runs DeepEP for
    deepseek_v3 from [parallelism] expert_parallel_comm_backend, which plan3d writes."""
    from planner.catalog import load_model
    from planner.errors import PlanError
    from planner.frameworks.emit import emit
    from planner.schema import PlanConfig

    dsv3 = load_model("deepseek-v3")
    plan = PlanConfig(dp=64, ep=8, mbs=1, n_micro=16, gbs=1024, seq_len=4096, zero_stage=3,
                      framework="torchtitan", sequence_parallel=False, moe_dispatcher="deepep")
    if SHORT == "0.3":
        from torchtitan.models.common.token_dispatcher import (
            AllToAllTokenDispatcher,
            LocalTokenDispatcher,
        )

        with pytest.raises(PlanError, match="config_registry"):
            emit(FORMAT, plan, dsv3)
        for module, config in (("qwen3", "qwen3_30b_a3b"), ("deepseek_v3", "deepseek_v3_671b")):
            cfg = _registry_config(module, config)
            kinds = {type(d) for _, d, _, _ in
                     cfg.model_spec.model.traverse(LocalTokenDispatcher.Config)}
            assert kinds == {AllToAllTokenDispatcher.Config}, (config, kinds)
        return
    from torchtitan.models.deepseek_v3.model.args import DeepSeekV3ModelArgs

    path = tmp_path / "job.toml"
    path.write_text(emit(FORMAT, plan, dsv3).text)
    from torchtitan.config.manager import ConfigManager

    cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
    assert cfg.parallelism.expert_parallel_comm_backend == "deepep"
    args = DeepSeekV3ModelArgs()
    args.update_from_config(cfg)
    assert args.moe_impl == "deepep"  # DeepEPMoE is built (models/moe/moe.py build_moe)


def _registry_config(module: str, config: str):
    """torchtitan 0.3's ConfigManager on a registry entry with no overrides."""
    from torchtitan.config.manager import ConfigManager

    return ConfigManager().parse_args(["--module", module, "--config", config])


def test_forced_balance_reaches_the_router_and_the_rest_is_refused(tmp_path):
    """moe: --moe-forced-balance is written as debug.moe_force_load_balance, which this release's
    ConfigManager parses and its MoE router reads (0.3.0: Decoder.Config sets each layer's
    router._debug_force_load_balance from it); a capacity factor and the shared-expert overlap,
    which torchtitan cannot be told on its command line, are refused in one line, not dropped."""
    row = ("--model qwen3-30b-a3b --gpus 32 --framework torchtitan --tp 2 --pp 2 --ep 8 "
           "--zero 2")
    cfg = load(row + " --moe-forced-balance", tmp_path)
    assert cfg.debug.moe_force_load_balance is True
    if SHORT == "0.3":  # what Trainer does with it: every MoE layer's router forced
        model = cfg.model_spec.model
        model.update_from_config(config=cfg)
        routers = [layer.moe.router for layer in model.layers
                   if getattr(layer, "moe", None) is not None]
        assert len(routers) == 48 and all(r._debug_force_load_balance for r in routers)
    assert load(row, tmp_path).debug.moe_force_load_balance is False
    for flag, words in (("--moe-capacity-factor 1.0", "routes dropless"),
                        ("--moe-shared-expert-overlap", "shared experts after the routed")):
        out = cli("explain", *shlex.split(row), *shlex.split(flag), "--emit", FORMAT)
        assert out.returncode == 2 and out.stdout == ""
        assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr


def test_the_loss_is_compiled_as_costed(tmp_path):
    """fit: --compile-loss is written as compile.enable with components ["loss"], which this
    release's ConfigManager parses; without it nothing is compiled, though 0.3's DeepSeek-V3
    registry entries compile the loss themselves (config_registry.py @ 0.3.0 l.241): the
    launch then runs the eager loss plan3d costed. Other frameworks refuse the flag in one line."""
    row = ("--model deepseek-v3 --gpus 256 --framework torchtitan --tp 1 --pp 8 --ep 32 "
           "--zero 2 --recompute full")
    compiled = load(row + " --compile-loss", tmp_path).compile
    assert compiled.enable is True and list(compiled.components) == ["loss"]
    assert load(row, tmp_path).compile.enable is False
    if SHORT == "0.3":  # what the registry entry alone would run
        assert _registry_config("deepseek_v3", "deepseek_v3_671b").compile.enable is True
    out = cli("explain", "--model", "llama-3.1-8b", "--gpus", "8", "--compile-loss")
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "torchtitan" in out.stderr


MODEL_16B = "planner/reference/models/torchtitan-deepseek-v3-16b.toml"


def test_the_shipped_deepseek_v3_16b_is_the_registry_flavour(tmp_path):
    """The model file plan3d ships for torchtitan's DeepSeek-V3 16B flavour is emitted as that
    registry entry (0.3: --module deepseek_v3 --config deepseek_v3_16b; 0.2: [model] flavor
    "16B"), with --compile-loss, and the entry builds plan3d's model: its dense and MoE layers,
    MLA and experts field by field, and on the meta device plan3d's parameter count,
    15,706,484,224 (torchtitan does not pad the vocabulary)."""
    import copy

    from planner.catalog import load_model

    row = f"--model {MODEL_16B} --gpus 8 --framework torchtitan --ep 8 --zero 3 --compile-loss"
    plan, model, cfg = plan_json(row), load_model(MODEL_16B), load(row, tmp_path)
    assert plan["model"]["n_params"] == 15_706_484_224
    dims = parallel_dims(cfg, 8)
    assert (dims.dp_shard, dims.ep, dims.tp, dims.pp) == (8, 8, 1, 1)
    assert cfg.compile.enable and list(cfg.compile.components) == ["loss"]
    if SHORT == "0.3":
        built = cfg.model_spec.model
        layers = built.layers
        dense = [layer for layer in layers if layer.moe is None]
        attention, moe = layers[-1].attention, layers[-1].moe
        shape = (built.dim, built.vocab_size, len(layers), len(dense),
                 dense[0].feed_forward.w1.out_features, attention.n_heads,
                 attention.q_lora_rank, attention.kv_lora_rank, attention.qk_nope_head_dim,
                 attention.qk_rope_head_dim, attention.v_head_dim, moe.num_experts,
                 moe.router.top_k, moe.routed_experts.inner_experts.hidden_dim,
                 moe.shared_experts.w1.out_features, moe.router.score_func,
                 moe.router.route_norm)
        with torch.device("meta"):
            module = built.build()
    else:
        from torchtitan.protocols.train_spec import get_train_spec

        assert (cfg.model.name, cfg.model.flavor) == ("deepseek_v3", "16B")
        spec = get_train_spec(cfg.model.name)
        args = copy.deepcopy(spec.model_args[cfg.model.flavor])
        args.update_from_config(cfg)  # the release's own step before it builds the model
        m = args.moe_args
        shape = (args.dim, args.vocab_size, args.n_layers, args.n_dense_layers, args.inter_dim,
                 args.n_heads, args.q_lora_rank, args.kv_lora_rank, args.qk_nope_head_dim,
                 args.qk_rope_head_dim, args.v_head_dim, m.num_experts, m.top_k,
                 args.moe_inter_dim, m.num_shared_experts * args.moe_inter_dim, m.score_func,
                 m.route_norm)
        with torch.device("meta"):
            module = spec.model_cls(args)
    # q_lora_rank 0 in torchtitan is no query compression: None in plan3d's model
    assert shape == (model.hidden, model.vocab, model.n_layers, model.first_k_dense, model.ffn,
                     model.n_heads, model.q_lora_rank or 0, model.kv_lora_rank,
                     model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim,
                     model.n_experts, model.top_k, model.moe_ffn,
                     model.n_shared_experts * model.moe_ffn, model.router,
                     model.norm_topk_prob)
    assert sum(p.numel() for p in module.parameters()) == plan["model"]["n_params"]
