"""--mtp/--no-mtp and --moe-shared-expert-overlap (issue 23): each moves the plan by the number the
formulas give by hand, in explain, search and compare alike; the overlap with another dispatcher
is refused in one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()

# DeepSeek-V3 on 2,048 H100, a layout that fits: h = 7168, t = 4, 16 layer slots a GPU,
# gbs 1024 over dp 128 → m = 8 micro-batches of b = 1, s = 4096
LAYOUT = ["--model", "deepseek-v3", "--gpus", "2048", "--hw", "h100-nvlink",
          "--plan", "dp128 tp4 pp4 v8 ep256 z1", "--gbs", "1024"]


def _explain(*extra):
    r = runner.invoke(app, ["explain", *LAYOUT, "--json", *extra])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    return data, {t["key"]: t["value"] for t in data["terms"]}


def test_no_mtp_takes_the_module_off_the_last_stage():
    with_mtp, on = _explain()
    without, off = _explain("--no-mtp")
    assert with_mtp["config"]["mtp"] is True and without["config"]["mtp"] is False
    assert on["mtp_depth"] == 1 and off["mtp_depth"] == 0
    assert on["mtp_s"] > 0 and off["mtp_s"] == 0 and off["mtp_bytes"] == 0
    # the module's own parameters beside its layer slot (formulas/moe_mtp.mtp_extra_params), D = 1:
    # eh_proj 2h²/t = 2·7168²/4 = 25,690,112, three norms 3h = 21,504, and the embedding copy
    # V′h/t = 129,536·7,168/4 = 232,128,512 (V′: 129,280 padded to a multiple of 128·t = 512)
    # → 257,840,128 fewer parameters on the last stage's GPU
    assert on["vocab_padded"] == 129_536
    assert on["params_last_stage"] - off["params_last_stage"] == 257_840_128
    assert without["time"]["step_s"] < with_mtp["time"]["step_s"]


def test_shared_expert_overlap_hides_three_shared_forwards_a_layer():
    plain, before = _explain()
    overlapped, after = _explain("--moe-shared-expert-overlap")
    assert overlapped["config"]["moe_shared_expert_overlap"] is True
    assert overlapped["config"]["moe_dispatcher"] is None  # the default, alltoall
    # one shared expert's forward on the GPU's tokens over t: 2·b·s·3·h·f_s/t FLOPs
    # = 2·4096·3·7168·2048/4 = 9.0194e10, at 989.4 TFLOP/s × 0.63 (the profile's bf16 GEMM
    # efficiency) S_f = 1.44699e-4 s. The forward's dispatch and combine hide under S_f, the
    # backward's under 2·S_f (moe_step.shared_overlap_exposed_s); each half of the exchange,
    # 2·T_a2a, is longer than 2·S_f here, so a layer's exposed exchange shrinks by 3·S_f, over
    # m = 8 micro-batches and the stage's 16 MoE layers: 8·16·3·1.44699e-4 = 0.0555646 s
    s_f = 2 * 4096 * 3 * 7168 * 2048 / 4 / (989.4e12 * 0.63)
    assert 2 * s_f < 2 * before["all_to_all_s"]
    assert before["ep_exposed_s"] - after["ep_exposed_s"] == pytest.approx(8 * 16 * 3 * s_f,
                                                                           rel=1e-9)
    assert overlapped["time"]["step_s"] < plain["time"]["step_s"]


def test_shared_expert_overlap_with_the_allgather_dispatcher_is_one_line():
    # Megatron-Core runs it with the alltoall or flex dispatcher (transformer_config.py
    # l.1820-1826 @ d98e8a64dd)
    r = runner.invoke(app, ["explain", *LAYOUT, "--moe-shared-expert-overlap",
                            "--moe-dispatcher", "allgather"])
    assert r.exit_code == 2
    assert r.stderr == (
        "plan3d: error: --moe-shared-expert-overlap runs with the alltoall or deepep dispatcher "
        "(Megatron-Core refuses it with allgather: \"moe_shared_expert_overlap only works with "
        "alltoall or flex token dispatcher\"); give --moe-dispatcher alltoall or deepep, or "
        "leave --moe-shared-expert-overlap out\n")


def test_shared_expert_overlap_runs_with_deepep_and_says_megatron_core_0_16_refuses_it():
    # d98e8a64dd runs it with the flex dispatcher (MoEFlexTokenDispatcher.token_dispatch runs
    # the shared experts' fc1 beside the dispatch, token_dispatcher.py l.1972-1979), so explain
    # prices it; megatron-core 0.16.1 allows alltoall alone (its transformer_config.py
    # l.1090-1095), which the emitted notes say
    r = runner.invoke(app, ["explain", *LAYOUT, "--moe-shared-expert-overlap",
                            "--moe-dispatcher", "deepep", "--emit", "megatron", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["config"]["moe_dispatcher"] == "deepep"
    assert data["config"]["moe_shared_expert_overlap"] is True
    assert any("megatron-core 0.16.1 refuses it" in n for n in data["launch"]["notes"])


def test_search_weighs_the_flags_and_row_1_runs_as_explain_prices_it():
    r = runner.invoke(app, ["search", "--model", "deepseek-v3", "--gpus", "2048", "--hw",
                            "h100-nvlink", "--dp", "128", "--tp", "4", "--pp", "4", "--vpp", "8",
                            "--ep", "256", "--gbs", "1024", "--top", "1", "--no-mtp",
                            "--moe-shared-expert-overlap", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    row = data["plans"][0]
    assert row["config"]["mtp"] is False and row["config"]["moe_shared_expert_overlap"] is True
    args = data["explain_args"][0]
    assert "--no-mtp" in args and "--moe-shared-expert-overlap" in args
    assert "--moe-dispatcher" not in args  # the overlap implies alltoall
    again = runner.invoke(app, [*args, "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["time"]["step_s"] == pytest.approx(row["time"]["step_s"],
                                                                       rel=1e-12)


def test_compare_takes_the_moe_flags():
    r = runner.invoke(app, ["compare", "--model", "deepseek-v3", "--hw", "h100-nvlink", "--gpus",
                            "2048", "--train-tokens", "1T", "--dp", "128", "--tp", "4", "--pp",
                            "4", "--vpp", "8", "--ep", "256", "--gbs", "1024", "--no-mtp",
                            "--moe-shared-expert-overlap", "--json"])
    assert r.exit_code == 0, r.output
    config = json.loads(r.stdout)["cells"][0]["plan"]["config"]
    assert config["mtp"] is False and config["moe_shared_expert_overlap"] is True


def test_the_megatron_settings_follow_the_flags():
    # with MTP: --mtp-num-layers 1 and the module as `m` in the last chunk of the layout (32
    # chunks of pp4 × v8 over 61 layers + 1 module); without: neither, the last chunk one layer
    def settings(*extra):
        r = runner.invoke(app, ["explain", *LAYOUT, "--emit", "megatron", *extra])
        assert r.exit_code == 0, r.output
        return r.stdout.split()

    plain = settings()
    assert plain[plain.index("--mtp-num-layers") + 1] == "1"
    assert plain[plain.index("--pipeline-model-parallel-layout") + 1].endswith('|t|mL"')
    assert "--moe-shared-expert-overlap" not in plain
    flagged = settings("--no-mtp", "--moe-shared-expert-overlap")
    assert "--mtp-num-layers" not in flagged and "--moe-shared-expert-overlap" in flagged
    assert flagged[flagged.index("--pipeline-model-parallel-layout") + 1].endswith('|t|tL"')
    assert flagged[flagged.index("--moe-token-dispatcher-type") + 1] == "alltoall"


@pytest.mark.parametrize("fmt, written", [
    ("megatron", "--moe-router-force-load-balancing"),
    ("nemo", "moe_router_force_load_balancing: true"),
])
def test_forced_balance_is_written_not_dropped(fmt, written):
    # Megatron-LM makes every TransformerConfig field a flag (ArgumentGroupFactory, arguments.py
    # @ d98e8a64dd): moe_router_force_load_balancing, which router.py reads, is
    # --moe-router-force-load-balancing and Megatron-Bridge's model.moe_router_force_load_balancing
    # (before, --emit dropped --moe-forced-balance without a word)
    def settings(*extra):  # Qwen3-30B-A3B: a model nemo's GPTModelProvider expresses
        r = runner.invoke(app, ["explain", "--model", "qwen3-30b-a3b", "--gpus", "32", "--tp",
                                "2", "--pp", "2", "--ep", "8", "--emit", fmt, *extra])
        assert r.exit_code == 0, r.output
        return r.stdout

    assert written in settings("--moe-forced-balance")
    assert written not in settings()
