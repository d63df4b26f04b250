"""`executor run` end to end, in a subprocess as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from executor.versions import installed_version
from twin.catalog.registry import load_config
from twin.layout.models import Layout
from twin.optimizations import OptimizationId, executor_refusals

REPO = Path(__file__).resolve().parents[2]


def executor(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}\nfrom executor.cli import main\nmain()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("executor: error: ") and expected in lines[0]


def test_dry_run_prints_command_environment_and_table(make_plan, tmp_path: Path) -> None:
    # C1's Megatron trainer and rollout TP2 without the directed reshard, which refuses them (test below)
    plan = make_plan(without=("directed_reshard",))
    proc = executor("run", str(plan), "--dry-run", "--workdir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Command:" in out and "-m verl.trainer.main_ppo model_engine=megatron" in out
    assert "actor_rollout_ref.rollout.expert_parallel_size=256" in out
    assert "Environment:" in out and "HCCL_OP_EXPANSION_MODE=AIV" in out and "TASK_QUEUE_ENABLE=2" in out
    for opt_id in typing.get_args(OptimizationId):
        assert opt_id in out
    for header in ("optimization", "mechanism", "status"):
        assert header in out
    assert not (tmp_path / "run").exists()  # a dry run writes nothing
    # C1 ran cann-recipes' patch that keeps the actor's weights for the sync: the installed verl does not
    assert proc.stderr.strip() == ("executor: warning: the plan's predictions assume weights_kept_for_sync (a recipe's "
                                   "patch), this verl offloads the actor's weights after the update: re-plan with the "
                                   "scenario's software as launched to predict this run")


def test_dry_run_of_the_planners_deepseek_plan(tmp_path: Path) -> None:
    # the planner's own 128-card DeepSeek-R1 plan (Megatron TP2 PP32 EP4 -> vLLM TP2 EP128): every optimization is
    # applied or, where this host lacks the package, unavailable; none is refused, the directed reshard included
    # (its Megatron reader traces DeepSeek-V3's bridge: MLA, shared experts, dense first layers)
    plan = tmp_path / "plan.json"
    made = subprocess.run([sys.executable, "-c", "from twin.cli import main; main()", "plan", "--model", "deepseek-r1",
                           "--cards", "128", "-o", str(plan)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert made.returncode == 0 and plan.is_file(), made.stderr
    layout = json.loads(plan.read_text())["layout"]
    assert (layout["train"]["engine"], layout["rollout"]["tp"]) == ("megatron", 2)
    assert executor_refusals("directed_reshard", Layout.model_validate(layout), load_config("deepseek-r1")) == []
    assert "refuses this plan" not in made.stdout
    assert not [o for o in json.loads(plan.read_text())["optimizations"] if o["executor_refusals"]]
    proc = executor("run", str(plan), "--dry-run")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "Command:" in proc.stdout and "checkpoint_engine.backend=directed" in proc.stdout
    rows = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in proc.stdout.splitlines()
            if line.count("│") == 5 and line.split("│")[1].strip() in typing.get_args(OptimizationId)}
    assert set(rows) == set(typing.get_args(OptimizationId))
    assert rows["directed_reshard"] == "applied" and "refused" not in rows.values()
    assert "warning" not in proc.stderr  # the planner predicts the verl the executor launches


def test_malformed_plan(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    _one_error_line(executor("run", str(bad), "--dry-run"), "not valid JSON")


def test_unknown_plan_schema_version(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"schema": 7}')
    _one_error_line(executor("run", str(bad), "--dry-run"), "schema version 7 is not supported")


def test_unsupported_verl_version(make_plan) -> None:
    prelude = ("import executor.versions as v\n_real = v.installed_version\n"
               "v.installed_version = lambda d: '0.8.2' if d == 'verl' else _real(d)")
    _one_error_line(executor("run", str(make_plan()), "--dry-run", prelude=prelude),
                    "verl 0.8.2 is not supported; the executor targets verl <0.10,>=0.9.0")


@pytest.mark.skipif(installed_version("torch-npu") is not None, reason="this host has torch_npu")
def test_real_run_without_npus_refuses(make_plan, tmp_path: Path) -> None:
    proc = executor("run", str(make_plan()), "--workdir", str(tmp_path / "run"))
    _one_error_line(proc, "this host has no Ascend NPU")
    assert not (tmp_path / "run").exists()


def test_invalid_launch_reports_each_problem(make_plan, tmp_path: Path) -> None:
    # a plan edited by hand after `twin plan` (which would refuse this layout): the plan check re-derives the
    # layout rules and refuses it before a launch is built; the launch's own check (vLLM's scheduler) agrees
    plan = json.loads(make_plan().read_text())
    for layout in (plan["layout"], plan["scenario"]["layout"]):
        layout["rollout"]["max_num_seqs"] = 4096  # > max_num_batched_tokens 1024
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(plan))
    _one_error_line(executor("run", str(path), "--dry-run"),
                    "field 'layout': max_num_batched_tokens >= max_num_seqs (vLLM scheduler): 1024 < 4096")
    proc = executor("run", str(path), "--dry-run", prelude="import executor.plan_check as c\n"
                                                          "c.check_plan = lambda plan, path: None")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "executor: invalid: max_num_batched_tokens 1024 < max_num_seqs 4096 (vLLM SchedulerConfig rejects it)"]


def _edited(plan_path: Path, edit) -> Path:
    raw = json.loads(plan_path.read_text())
    edit(raw)
    out = plan_path.with_name("edited.json")
    out.write_text(json.dumps(raw))
    return out


def _set(raw: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        raw = raw[key]
    raw[leaf] = value


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("layout.rollout.dp", 40, "field 'layout'"),  # both copies edited below: the layout itself is checked
    ("scenario.model", "no-such-model", "field 'scenario.model': unknown model"),
    ("scenario.cluster.kind", "a2", "field 'predictions.devices'"),
    ("predictions.devices", 40, "field 'predictions.devices': 40 does not match"),
    ("scenario.name", "../escape", "plain name"),
])
def test_edited_plan_is_refused_naming_the_field(make_plan, field, value, expected) -> None:
    def edit(raw: dict) -> None:
        _set(raw, field, value)
        if field.startswith("layout."):
            _set(raw["scenario"], field, value)

    _one_error_line(executor("run", str(_edited(make_plan(), edit)), "--dry-run"), expected)


def test_flipped_optimization_and_diverging_layout_copies(make_plan) -> None:
    from executor.plan_check import check_plan
    from twin.errors import TwinError
    from twin.plan import Plan

    raw = json.loads(make_plan().read_text())
    flipped = json.loads(json.dumps(raw))
    flipped["optimizations"][0]["enabled"] = not flipped["optimizations"][0]["enabled"]
    with pytest.raises(TwinError, match="field 'optimizations': the enabled ones differ"):
        check_plan(Plan.model_validate(flipped), "p.json")
    diverged = json.loads(json.dumps(raw))
    diverged["layout"]["rollout"]["max_num_seqs"] += 1
    with pytest.raises(TwinError, match=r"field 'layout': differs from scenario\.layout"):
        check_plan(Plan.model_validate(diverged), "p.json")
    separate = json.loads(json.dumps(raw))
    separate["scenario"].pop("measured", None)  # a separate scenario measures only its weight sync
    for copy in (separate, separate["scenario"]):
        copy["layout"]["placement"] = "separate"
    with pytest.raises(TwinError, match=r"field 'layout\.placement': 'separate': the executor launches colocated"):
        check_plan(Plan.model_validate(separate), "p.json")
    mindspeed = json.loads(json.dumps(raw))
    mindspeed["scenario"]["software"] = {"framework": "mindspeed_rl"}
    for copy in (mindspeed, mindspeed["scenario"]):  # verl's balance_batch, which a MindSpeed-RL scenario cannot state
        copy["layout"]["train"].pop("balance_batch", None)
    with pytest.raises(TwinError, match=r"field 'scenario\.software\.framework': 'mindspeed_rl': the executor "
                                        r"launches verl runs only"):
        check_plan(Plan.model_validate(mindspeed), "p.json")
    check_plan(Plan.model_validate(raw), "p.json")  # the unedited plan passes


def test_dry_run_under_a_directory_whose_path_holds_equals(make_plan, tmp_path: Path) -> None:
    # the default run directory runs/<name>-<time> under a current directory named a=b: its paths reach Hydra quoted;
    # the UserWarnings Megatron core prints on import without Apex stay out of the executor's own stderr
    cwd = tmp_path / "a=b"
    (cwd / "model").mkdir(parents=True)
    (cwd / "data").mkdir()
    plan = make_plan(REPO / "scenarios" / "cpu-tiny-grpo-megatron.yaml")
    proc = subprocess.run([sys.executable, "-c", "from executor.cli import main\nmain()", "run", str(plan), "--dry-run",
                           "--model-path", "model", "--data-dir", "data"], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"trainer.default_local_dir='\"'\"'{cwd / 'runs'}/cpu-tiny-grpo-megatron-" in proc.stdout
    assert f"data.train_files='\"'\"'{cwd / 'data' / 'train.parquet'}'\"'\"'" in proc.stdout
    # the plan's micro-batches of 16 sequences, not each rank's whole share (16 x 4 / 2 = 32)
    assert " actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 " in proc.stdout
    assert " actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 " in proc.stdout
    assert "UserWarning" not in proc.stderr and "Apex" not in proc.stderr, proc.stderr
    assert not (cwd / "runs").exists()


def test_a_cpu_plan_with_dynamic_batches_is_refused_in_one_line(make_plan, tmp_path: Path) -> None:
    scenario = tmp_path / "dynamic.yaml"
    scenario.write_text((REPO / "scenarios" / "cpu-tiny-grpo.yaml").read_text().replace(
        "train: {engine: fsdp,", "train: {engine: fsdp, dynamic_batch_tokens: 4096,"))
    for name in ("model", "data"):
        (tmp_path / name).mkdir()
    proc = executor("run", str(make_plan(scenario)), "--dry-run", "--model-path", str(tmp_path / "model"),
                    "--data-dir", str(tmp_path / "data"))
    _one_error_line(proc, "not dynamic batches of 4096 tokens; drop layout.train.dynamic_batch_tokens")


def test_a_run_directory_ray_would_expand_is_refused_in_one_line(make_plan, tmp_path: Path) -> None:
    proc = executor("run", str(make_plan()), "--dry-run", "--workdir", str(tmp_path / "$HOME"))
    _one_error_line(proc, "holds '$H', which verl's config or Ray would expand")


def test_only_megatrons_and_mbridges_missing_apex_warnings_are_ignored() -> None:
    import warnings

    from executor.cli import quiet_import_warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_import_warnings()
        for module, message in (("megatron.core.optimizer", "Transformer Engine and Apex are not installed. Falling"),
                                ("mbridge.models.x", "Apex is not installed. Falling back to Torch Norm"),
                                ("megatron.core.x", "something else"), ("mypkg", "Apex is not installed.")):
            warnings.warn_explicit(message, UserWarning, "f.py", 1, module=module)
    assert [str(w.message) for w in seen] == ["something else", "Apex is not installed."]
