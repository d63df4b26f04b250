"""The `twin` command as a user runs it: outputs, plan.json against its schema, one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALL_SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def _separate(path: Path) -> bool:
    return (yaml.safe_load(path.read_text()).get("layout") or {}).get("placement") == "separate"


SCENARIOS = [p for p in ALL_SCENARIOS if not _separate(p)]
SEPARATE = [p for p in ALL_SCENARIOS if _separate(p)]
DESIGN_KEYS = {"scenario", "cards", "devices", "step_s", "tps_per_card", "tps_per_device", "stages_s",
               "memory_peak_gb", "memory_peak_gb_max", "hbm_gb", "fits", "memory_gb",
               "kv_cache_bytes_per_token_per_device", "reshard", "profile", "twin_version"}


def twin(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_models_json_counts():
    out = twin("models", "--json")
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["deepseek-r1"]["total_params"] == 671_026_419_200
    assert rows["deepseek-r1"]["active_params"] == 36_625_618_432
    assert rows["deepseek-r1"]["experts"] == 256 and rows["deepseek-r1"]["layers"] == 61
    assert rows["llama2-7b"]["experts"] == 0


def test_clusters_and_layouts():
    assert json.loads(twin("clusters", "--json").stdout)[1]["devices_per_card"] == 2
    out = twin("layouts", "--model", "deepseek-r1", "--cards", "128", "--json")
    data = json.loads(out.stdout)
    assert data["devices"] == 256 and data["train_layouts"] > 0 and data["rollout_layouts"] > 0


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_simulate_every_scenario(path):
    out = twin("simulate", str(path), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) >= DESIGN_KEYS
    assert set(result["memory_peak_gb"]) == {"update", "log_prob", "rollout", "transition"}
    assert {"method", "bytes_total", "bytes_per_device_max", "extra_memory_gb_per_device_max",
            "alternatives"} <= set(result["reshard"])
    assert result["step_s"] == pytest.approx(sum(result["stages_s"].values()))
    measured = yaml.safe_load(path.read_text()).get("measured") or {}
    if {"step_s", "stages_s", "tps_per_card", "tps_per_device", "rollout_tps_per_card"} & set(measured):
        assert result["fits"], result["memory_peak_gb"]  # a published run ran: the twin must not call it unfit


def test_simulate_varies_the_length_spread_on_request():
    """`--length-spread` adds one note (the rollout and step at sigma 0.4 and 0.6 around Moonlight's 0.5); the closed
    form, which does not simulate the lengths, refuses it in one line."""
    path = ROOT / "scenarios" / "c6-dapo-moonlight-16b-a2-8-megatron.yaml"
    out = twin("simulate", str(path), "--length-spread", "--json")
    assert out.returncode == 0, out.stderr
    notes = [n for n in json.loads(out.stdout)["notes"] if n.startswith("length spread:")]
    assert len(notes) == 1 and "sigma 0.4: rollout" in notes[0] and "sigma 0.6: rollout" in notes[0]
    refused = twin("simulate", str(path), "--length-spread", "--analytical")
    assert refused.returncode != 0 and refused.stdout == ""
    assert refused.stderr.strip().count("\n") == 0 and "--length-spread" in refused.stderr


@pytest.mark.parametrize("path", SEPARATE, ids=[p.stem for p in SEPARATE])
def test_a_disaggregated_scenario_predicts_its_weight_sync_and_refuses_a_step(path):
    out = twin("weight-sync", str(path), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    method = yaml.safe_load(path.read_text())["software"]["weight_sync"]
    assert result["method"] == method and result["weight_sync_s"] == result["methods"][method]["seconds"] > 0
    assert result["checkpoint_engine"] == "verl 0.7 recipe"  # C9 was measured on verl 0.7.0.dev (cdd7d874f)
    assert result["trainer_devices"] + result["rollout_devices"] == yaml.safe_load(path.read_text())["cluster"]["cards"]
    for command in (("simulate", str(path)), ("plan", "--scenario", str(path), "-o", "never.json")):
        refused = twin(*command)
        assert refused.returncode == 2 and refused.stdout == "" and not Path("never.json").exists()
        assert refused.stderr.count("\n") == 1 and "`twin weight-sync`" in refused.stderr, refused.stderr


def test_plan_writes_a_schema_valid_plan(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    out = twin("plan", "--model", "deepseek-r1", "--cards", "128", "-o", "plan.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "512 prompts x n=16" in out.stdout  # the recipes' defaults are printed
    plan = json.loads((tmp_path / "plan.json").read_text())
    schema = json.loads(twin("schema").stdout)
    jsonschema.validate(plan, schema)
    assert plan["schema"] == 1 and plan["predictions"]["fits"]
    assert plan["runner_ups"] and all(r["why_lost"] for r in plan["runner_ups"])
    again = twin("simulate", str(tmp_path / "plan.json"), "--json")
    assert json.loads(again.stdout)["step_s"] == pytest.approx(plan["predictions"]["step_s"])


def _one_line_error(out: subprocess.CompletedProcess, fragment: str) -> None:
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert fragment in lines[0]
    assert "Traceback" not in out.stderr


def test_bad_inputs_get_one_line(tmp_path):
    _one_line_error(twin("layouts", "--model", "gpt-9", "--cards", "8"), "unknown model 'gpt-9'")
    bad_cfg = tmp_path / "config.json"
    bad_cfg.write_text('{"model_type": "qwen2", "hidden_size": 64}')
    _one_line_error(twin("layouts", "--model", str(bad_cfg), "--cards", "8"), "field 'num_attention_heads'")
    _one_line_error(twin("layouts", "--model", "qwen3-8b"), "Missing option '--cards'")
    _one_line_error(twin("layouts", "--model", "qwen3-8b", "--cards", "8", "--cluster", "tpu"),
                    "unknown cluster kind")
    broken = (ROOT / "scenarios" / "c1-dsr1-a3-128.yaml").read_text().replace("tp: 4, pp: 8", "tp: 3, pp: 8")
    (tmp_path / "broken.yaml").write_text(broken)
    _one_line_error(twin("simulate", str(tmp_path / "broken.yaml")), "devices = TP x PP x CP x DP")
    (tmp_path / "garbage.yaml").write_text("schema: 1\nname: [unclosed\n")
    _one_line_error(twin("simulate", str(tmp_path / "garbage.yaml")), "not valid YAML")
    (tmp_path / "typo.yaml").write_text("schema: 1\nname: x\nmodel: qwen3-8b\ncluster: {kind: a2, cards: 8}\n"
                                        "worklod: {}\n")
    _one_line_error(twin("simulate", str(tmp_path / "typo.yaml")), "field 'worklod'")
    (tmp_path / "old.json").write_text('{"schema": 99}')
    _one_line_error(twin("simulate", str(tmp_path / "old.json")), "schema version 99 is not supported")
    _one_line_error(twin("simulate", str(tmp_path / "missing.yaml")), "no such file")
    _one_line_error(twin("plan", "--model", "llama2-70b", "--cards", "1", "--cluster", "a2", "-o",
                         str(tmp_path / "p.json")), "no layout of llama2-70b fits")


def _inproc(*argv: str) -> tuple[int, str, str]:
    """`twin argv` in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from twin.cli import app
    from twin.clirun import run_app

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run_app(app, "twin", argv=list(argv))
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(("argv", "expected"), [
    (("plan", "--model", "deepseek-r1", "--cards", "0"), "0 is outside its domain, 1 to 16,384: 8192 A3 cards"),
    (("layouts", "--model", "deepseek-r1", "--cards", "-5"), "-5 is outside its domain, 1 to 16,384"),
    (("plan", "--model", "deepseek-r1", "--cards", "1000000"), "1000000 is outside its domain"),
    (("layouts", "--model", "tiny", "--cards", "2", "--sample", "0"), "0 is outside its domain, 1 to 10,000"),
    (("simulate", str(ROOT / "scenarios" / "cpu-tiny-grpo.yaml"), "--seed", "-1"), "-1 is outside its domain, 0 to"),
    (("plan", "--model", "tiny", "--cards", "2", "--time-limit", "0"), "0.0 is outside its domain, 1 to 86,400"),
])
def test_option_domains_are_one_line(argv, expected):
    code, _, err = _inproc(*argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err


def test_outputs_are_checked_before_any_work(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text((ROOT / "scenarios" / "cpu-tiny-grpo.yaml").read_text())
    sc.chmod(0o644)
    before = sc.read_bytes()
    for argv, expected in [
        (("plan", "--scenario", str(sc), "-o", str(sc)), "--output"),
        (("simulate", str(sc), "--trace", str(sc)), "--trace"),
        (("plan", "--scenario", str(sc), "--keep-layout", "-o", str(tmp_path)), "is a directory"),
        (("plan", "--scenario", str(sc), "--keep-layout", "-o", "/dev/null"), "is a system path"),
        (("simulate", str(sc), "--plot", str(sc)), "is not a directory"),
    ]:
        code, _, err = _inproc(*argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and expected in err, err
    assert sc.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    plan.chmod(0o644)
    assert _inproc("plan", "--scenario", str(sc), "--keep-layout", "-o", str(plan))[0] == 0
    assert plan.stat().st_mode & 0o777 == 0o644  # rewritten in place of the old file, its mode kept


def test_time_limit_returns_the_best_plan_so_far(tmp_path, monkeypatch):
    import twin.planner

    clock = iter(range(0, 10**6, 100))  # every look at the clock is 100 s later: the limit passes at once
    monkeypatch.setattr(twin.planner.time, "perf_counter", lambda: float(next(clock)))
    code, out, err = _inproc("plan", "--model", "tiny", "--cluster", "cpu", "--cards", "2", "--time-limit", "1",
                             "-o", str(tmp_path / "p.json"), "--json")
    assert code == 0, err
    search = json.loads(out)["search"]
    assert search["stopped"].startswith("time limit reached") and search["simulated"] == 1


def test_a_plan_written_elsewhere_keeps_the_scenarios_profile_file(tmp_path):
    """A scenario naming its profile relative to itself: the plan written in another directory carries the
    profile's absolute path, so `twin simulate` of the plan from a third directory predicts with it."""
    (tmp_path / "cases").mkdir()
    (tmp_path / "plans").mkdir()
    (tmp_path / "cases" / "mine.yaml").write_text((ROOT / "twin" / "profiles" / "cpu.yaml").read_text())
    raw = yaml.safe_load((ROOT / "scenarios" / "cpu-tiny-grpo.yaml").read_text())
    (tmp_path / "cases" / "s.yaml").write_text(yaml.safe_dump({**raw, "profile": "mine.yaml"}))
    out = twin("plan", "--scenario", "cases/s.yaml", "--keep-layout", "-o", "plans/p.json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "plans" / "p.json").read_text())
    assert plan["scenario"]["profile"] == str((tmp_path / "cases" / "mine.yaml").resolve())
    sim = twin("simulate", str(tmp_path / "plans" / "p.json"), "--json", cwd=ROOT)
    assert sim.returncode == 0, sim.stderr
