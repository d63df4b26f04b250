"""The paths `executor run` and `executor command-file` share: the run directory and the paths verl or Ray expand."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.errors import ExecutorError
from executor.paths import launch_options, refuse_expanded, run_dir
from twin.errors import TwinError
from twin.plan import load_plan


def test_a_given_run_directory_must_be_a_directory_or_new(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    with pytest.raises(TwinError, match="is not a directory"):
        run_dir(plan, "x", plan)
    with pytest.raises(TwinError, match="does not exist"):
        run_dir(tmp_path / "missing" / "run", "x", plan)
    assert run_dir(tmp_path / "w=1", "x", plan) == (tmp_path / "w=1").resolve()


def test_the_default_run_directory_stays_in_runs_also_under_odd_names(tmp_path: Path, monkeypatch) -> None:
    cwd = tmp_path / "a=b it's"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert run_dir(None, "cpu", cwd / "plan.json", stamp=False) == cwd.resolve() / "runs" / "cpu"
    assert run_dir(None, "cpu", cwd / "plan.json").name.startswith("cpu-")
    with pytest.raises(ExecutorError, match="outside runs/"):
        run_dir(None, "..", cwd / "plan.json", stamp=False)


@pytest.mark.parametrize(("path", "env", "refused"), [
    ("/data/x${y}", False, "'${'"),
    ("/data/$HOME", False, None),  # Hydra and verl keep it; only Ray's environment would expand it
    ("/runs/$HOME", True, "'$H'"),
    ("/runs/${x}", True, "'${'"),
    ("/runs/cost$", True, None),
    ("/runs/$ 1", True, None),
])
def test_paths_verl_or_ray_would_expand(path: str, env: bool, refused: str | None) -> None:
    if refused is None:
        refuse_expanded(path, "--x", env=env)
        return
    with pytest.raises(ExecutorError, match=f"--x: holds {refused.replace('$', '[$]')}"):
        refuse_expanded(path, "--x", env=env)


def test_a_relative_path_is_checked_as_resolved_too(tmp_path: Path, monkeypatch) -> None:
    cwd = tmp_path / "x${y}"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    with pytest.raises(ExecutorError, match=r"--model-path model \(as .*x\$\{y\}/model\): holds"):
        refuse_expanded("model", "--model-path model")


def test_launch_options_refuse_a_model_path_verl_would_expand(make_plan, tmp_path: Path) -> None:
    plan_path = make_plan()
    plan = load_plan(plan_path)
    with pytest.raises(ExecutorError, match=r"--model-path /m/\$\{x\}: holds"):
        launch_options(plan, plan_path, tmp_path / "run", "/m/${x}", None, None)
    options = launch_options(plan, plan_path, tmp_path / "run", "/m/a=b", tmp_path / "d=1", 2, stamp=False)
    assert (options.workdir, options.model_path, options.data_dir) == ((tmp_path / "run").resolve(), "/m/a=b",
                                                                        (tmp_path / "d=1").resolve())
