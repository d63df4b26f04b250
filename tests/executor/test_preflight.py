"""Preflight of a real run: packages, the model's config.json against the plan, data files."""

from __future__ import annotations

import shutil
from pathlib import Path

from executor.options import LaunchOptions
from executor.preflight import data_problems, model_problems, named_path_problems, preflight, required_dists
from executor.targets import target_for
from executor.versions import installed_version
from twin.plan import load_plan

CATALOG = Path(__file__).resolve().parents[2] / "twin" / "catalog" / "configs"


def _checkpoint(tmp_path: Path, catalog_name: str) -> Path:
    model = tmp_path / catalog_name
    model.mkdir()
    shutil.copy(CATALOG / f"{catalog_name}.json", model / "config.json")
    return model


def test_model_config_must_match_the_plan(make_plan, tmp_path: Path) -> None:
    plan = load_plan(make_plan())
    assert model_problems(plan, str(_checkpoint(tmp_path, "deepseek-r1"))) == []
    wrong = model_problems(plan, str(_checkpoint(tmp_path, "qwen2.5-7b")))
    assert any("hidden_size is 3584, the plan's deepseek-r1 has 7168" in p for p in wrong)
    assert any("0 routed experts, the plan's model has 256" in p for p in wrong)
    assert model_problems(plan, None) == ["--model-path is required for a real run (the HuggingFace checkpoint "
                                          "directory)"]
    assert model_problems(plan, str(tmp_path)) == [f"model path {tmp_path}: no config.json"]


def test_data_files_must_exist(tmp_path: Path) -> None:
    options = LaunchOptions(workdir=tmp_path, data_dir=tmp_path)
    assert data_problems(options) == [f"data file {tmp_path / 'train.parquet'} not found",
                                      f"data file {tmp_path / 'test.parquet'} not found"]
    for name in ("train.parquet", "test.parquet"):
        (tmp_path / name).write_bytes(b"")
    assert data_problems(options) == []


def test_packages_an_ascend_megatron_run_needs(make_plan, tmp_path: Path) -> None:
    plan = load_plan(make_plan())
    target = target_for("a3")
    assert set(required_dists(plan, target)) == {"ray", "TransferQueue", "vllm", "torch-npu", "vllm-ascend",
                                                 "mindspeed", "megatron-core"}
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.parquet", "test.parquet"):
        (data / name).write_bytes(b"")
    options = LaunchOptions(workdir=tmp_path, model_path=str(_checkpoint(tmp_path, "deepseek-r1")), data_dir=data)
    missing = [d for d in required_dists(plan, target) if installed_version(d) is None]
    problems = preflight(plan, options, target)
    packages = [p for p in problems if "not installed" in p]
    assert packages == [f"{d} not installed (needed for {required_dists(plan, target)[d]})" for d in missing]
    # the twin predicts about 1 TB of offloaded state per node for C1: far more than this host has
    host = [p for p in problems if p.startswith("offload needs")]
    need = plan.predictions.host_memory_gb_per_node
    assert len(host) == 1 and f"{need:.0f} GB of host memory per node" in host[0]
    assert len(problems) == len(packages) + 1


def test_a_model_or_data_path_that_is_no_directory(make_plan, tmp_path: Path) -> None:
    plan = load_plan(make_plan())
    afile = tmp_path / "plan.json"
    afile.write_text("{}")
    assert model_problems(plan, str(tmp_path / "missing")) == [f"model path {tmp_path / 'missing'}: no such directory"]
    assert model_problems(plan, str(afile)) == [f"model path {afile}: is not a directory"]
    assert model_problems(plan, "") == ["--model-path is empty"]
    assert model_problems(plan, "/dev/zero") == ["model path /dev/zero: is not a directory"]
    assert data_problems(LaunchOptions(workdir=tmp_path, data_dir=afile)) == [
        f"data directory {afile}: is not a directory"]


def test_only_the_paths_named_are_checked_before_a_run(make_plan, tmp_path: Path) -> None:
    plan = load_plan(make_plan())
    assert named_path_problems(plan, LaunchOptions(workdir=tmp_path)) == []
    options = LaunchOptions(workdir=tmp_path, model_path=str(_checkpoint(tmp_path, "qwen2.5-7b")),
                            data_dir=tmp_path / "missing")
    problems = named_path_problems(plan, options)
    assert any("hidden_size is 3584" in p for p in problems)
    assert problems[-1] == f"data directory {tmp_path / 'missing'}: no such directory"


def test_an_fsdp_run_on_gpus_needs_flash_attention(make_plan, tmp_path: Path) -> None:
    """verl 0.9.1 builds its FSDP models with FlashAttention 2: the actor by default, PPO's critic always (a tiny PPO
    run on this CPU host stops there: "FlashAttention2 has been toggled on, but ... the package for FlashAttention2
    doesn't seem to be installed"); on Ascend torch_npu serves it, and a Megatron run does not use it."""
    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    ppo = load_plan(make_plan(scenarios / "c6-ppo-qwen3-8b-a2-8-fsdp.yaml"))
    assert "flash-attn" not in required_dists(ppo, target_for("a2"))  # torch-npu's
    gpu = ppo.model_copy(update={"scenario": ppo.scenario.model_copy(
        update={"cluster": ppo.scenario.cluster.model_copy(update={"kind": "h100"})})})
    assert required_dists(gpu, target_for("h100"))["flash-attn"] == (
        "verl's FSDP models (FlashAttention 2; always for PPO's critic)")
    megatron = load_plan(make_plan(scenarios / "c8-grpo-qwen3-30b-a3b-h20-128.yaml"))
    assert "flash-attn" not in required_dists(megatron, target_for("h20"))
