"""`twin plan` as a user runs it with the explain, headroom and risk options, and the command file it
writes beside the plan through the installed executor."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from twin import cli
from twin.command_file import command_file_for, executor_command
from twin.plan import plan_json_schema


def twin(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin", *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env=env)


@pytest.mark.skipif(shutil.which("executor") is None, reason="the executor console script is not installed")
def test_plan_explains_and_writes_the_command_beside_it(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    (tmp_path / "p").mkdir()  # an output's directory must exist (the file boundary refuses a missing parent)
    out = twin("plan", "--model", "qwen2.5-7b", "--cards", "8", "--top", "2", "--headroom", "0.1", "-o", "p/plan.json",
               "--explain", "TP8 PP1 | TP2 DP8 seqs64", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "headroom 10.0% of usable memory in every phase (--headroom); ranked by p50" in out.stdout
    assert "invalid: attention heads divisible by TP: 28 heads % TP8 != 0" in out.stdout
    plan = json.loads((tmp_path / "p" / "plan.json").read_text())
    jsonschema.validate(plan, plan_json_schema())
    usable = plan["predictions"]["capacity_gb"]  # an A3 die's allocator capacity, below its 64 GiB of HBM
    assert usable == 65.79 and plan["predictions"]["hbm_gb"] == 68.72
    assert plan["headroom_fraction"] == 0.1 and plan["predictions"]["memory_peak_gb_max"] <= usable * 0.9
    assert plan["explained"]["rejected_by"].startswith("rule attention heads divisible by TP")
    assert plan["runner_ups"][0]["versus"]["stages_s"] and plan["runner_ups"][0]["why_lost"]
    command = (tmp_path / "p" / "plan.command.sh").read_text()
    util = plan["layout"]["rollout"]["gpu_memory_utilization"]
    assert "verl.trainer.main_ppo" in command
    assert f"actor_rollout_ref.rollout.gpu_memory_utilization={util:g}" in command
    assert "export HCCL_BUFFSIZE=300" in command
    assert "wrote p/plan.command.sh" in out.stdout


@pytest.mark.skipif(shutil.which("executor") is None, reason="the executor console script is not installed")
def test_json_plan_writes_the_command_file_too(tmp_path):
    """With --json the plan goes to stdout and plan.json, the command file beside it, the notes to stderr."""
    out = twin("plan", "--model", "qwen2.5-7b", "--cards", "8", "--top", "1", "--json", "-o", "plan.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json.loads((tmp_path / "plan.json").read_text())
    assert "verl.trainer.main_ppo" in (tmp_path / "plan.command.sh").read_text()
    assert "wrote plan.json" in out.stderr and "wrote plan.command.sh" in out.stderr


def test_without_executor_the_command_file_is_skipped_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with command_file_for(tmp_path / "plan.json") as started:
        started.report(cli.console)
    assert capsys.readouterr().out == "executor is not installed: no command file written\n"
    assert not (tmp_path / "plan.command.sh").exists()


def test_an_environment_used_without_activating_it_still_writes_the_command_file(tmp_path, monkeypatch):
    """No `executor` on PATH (a virtual environment's twin run by its path): the executor beside the twin's package
    runs under the twin's interpreter."""
    assert shutil.which("executor", path="/usr/bin:/bin") is None
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert executor_command() == [sys.executable, "-m", "executor"]
    out = twin("plan", "--model", "qwen2.5-7b", "--cards", "8", "--top", "1", "-o", "plan.json", cwd=tmp_path,
               env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "verl.trainer.main_ppo" in (tmp_path / "plan.command.sh").read_text()


@pytest.mark.skipif(shutil.which("executor") is None, reason="the executor console script is not installed")
def test_a_started_command_file_not_told_to_write_writes_nothing(tmp_path):
    """No plan saved (no layout fits, an error): the executor started before the search is stopped, no file."""
    with command_file_for(tmp_path / "plan.json") as started:
        pass
    assert started.proc is not None and started.proc.returncode is not None
    assert not (tmp_path / "plan.command.sh").exists()


@pytest.mark.parametrize("args, fragment", [
    (("--risk", "p70"), "--risk 'p70': give p50 or p90"),
    (("--cards", "8,x"), "give a card count or several separated by commas"),
    (("--explain", "TP2 PP1"), "give a scenario file or 'TRAINING | ROLLOUT'"),
    (("--time-limit", "nan"), "nan is outside its domain, 1 to 86,400"),
])
def test_bad_options_get_one_line(tmp_path, args, fragment):
    base = ["plan", "--model", "qwen2.5-7b", "-o", "plan.json"]
    out = twin(*base, *(args if "--cards" in args else ("--cards", "8", *args)), cwd=tmp_path)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and fragment in out.stderr


def test_pareto_over_card_counts_plots_and_records_the_joint_front(tmp_path):
    from tests.twin.test_cli import _inproc

    out = tmp_path / "p.json"
    code, stdout, err = _inproc("plan", "--model", "tiny", "--cluster", "cpu", "--cards", "1,2", "--pareto", "-o",
                                str(out))
    assert code == 0, err
    plan = json.loads(out.read_text())
    pts = plan["pareto"]
    assert {p["cards"] for p in pts} <= {1, 2} and sum(p["chosen"] for p in pts) <= 1
    for p in pts:  # card-hours are the cards times the step, in hours
        assert p["card_hours_per_step"] == p["cards"] * p["step_s"] / 3600
    text = " ".join(stdout.split())  # the table's title wraps at the console's width
    assert "not dominated on step time, headroom, reshard volume, card-hours" in text
    png = tmp_path / "p.pareto.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in text


@pytest.mark.parametrize("case", ["explain_is_output", "scenario_beside_output", "explain_beside_pareto"])
def test_no_output_of_plan_overwrites_an_input(tmp_path, case):
    """The plan, its command file and its Pareto PNG are each checked against every input file before the search:
    an --explain plan given as --output, a scenario named like the command file, an --explain file named like
    the PNG."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text((Path(__file__).resolve().parents[2] / "scenarios" / "cpu-tiny-grpo.yaml").read_text())
    guarded, args = {
        "explain_is_output": (tmp_path / "p.json", ["--scenario", "s.yaml", "--explain", "p.json", "-o", "p.json"]),
        "scenario_beside_output": (tmp_path / "s.command.sh", ["--scenario", "s.command.sh", "--keep-layout",
                                                               "-o", "s.json"]),
        "explain_beside_pareto": (tmp_path / "q.pareto.png", ["--scenario", "s.yaml", "--pareto", "--explain",
                                                              "q.pareto.png", "-o", "q.json"]),
    }[case]
    if guarded.suffix == ".sh":
        shutil.copy(scenario, guarded)
    else:
        guarded.write_text('{"stands for": "a file the user keeps"}\n')
    before = guarded.read_bytes()
    out = twin("plan", *args, cwd=tmp_path)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "is also an input of this command" in out.stderr
    assert guarded.read_bytes() == before
