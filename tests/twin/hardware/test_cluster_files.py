"""A user's cluster file: used by `twin plan` and `twin simulate`, shown by `twin clusters`, and a malformed
one is one line on stderr naming the file and the field."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from twin.errors import TwinError
from twin.hardware import CLUSTER_KINDS, ClusterKind, cluster_kind, load_cluster_file
from twin.hardware.report import kind_json

ROOT = Path(__file__).resolve().parents[3]


def twin(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "twin", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def user_a2(hbm_gb: float = 40.0) -> dict:
    """The shipped a2 kind as a user's file would hold it, with its own HBM size and no allocator capacity."""
    raw = kind_json(CLUSTER_KINDS["a2"])
    raw.pop("devices_per_node")
    raw.update(name="lab-a2", profile="a2")
    raw["device"]["hbm_gb"] = {"value": hbm_gb, "confidence": "M", "source": "our lab's 910B4-like cards"}
    raw["device"].pop("allocator_gb")
    return raw


def write(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_json_listing_is_the_file_format(tmp_path):
    for kind in CLUSTER_KINDS.values():
        raw = kind_json(kind)
        raw.pop("devices_per_node")
        assert load_cluster_file(write(tmp_path / f"{kind.name}.yaml", raw)) == kind


def test_device_by_name_and_path_relative_to_the_scenario(tmp_path):
    raw = user_a2()
    raw["device"] = "910b"
    (tmp_path / "hw").mkdir()
    write(tmp_path / "hw" / "lab.yaml", raw)
    kind = cluster_kind("hw/lab.yaml", base_dir=tmp_path)
    assert kind.device is CLUSTER_KINDS["a2"].device and kind.profile_kind == "a2"
    with pytest.raises(TwinError, match="unknown cluster kind 'tpu'"):
        cluster_kind("tpu")


def test_plan_and_simulate_use_the_users_file(tmp_path):
    write(tmp_path / "lab.yaml", user_a2(hbm_gb=40.0))
    out = twin("plan", "--cluster", "lab.yaml", "--model", "tiny", "--cards", "1", "--top", "1", "-o", "plan.json",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["scenario"]["cluster"]["kind"] == str(tmp_path / "lab.yaml")  # absolute: the plan carries it
    assert plan["predictions"]["hbm_gb"] == plan["predictions"]["capacity_gb"] == 40.0  # no allocator figure: HBM
    scenario = (ROOT / "scenarios" / "own-qwen25-1.5b-a2-8.yaml").read_text().replace("kind: a2,", "kind: lab.yaml,")
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "lab.yaml").write_text(yaml.safe_dump(user_a2(hbm_gb=48.0), sort_keys=False))
    (tmp_path / "cases" / "s.yaml").write_text(scenario)
    sim = twin("simulate", str(tmp_path / "cases" / "s.yaml"), "--json")
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["hbm_gb"] == 48.0
    raw = user_a2(hbm_gb=48.0)
    raw["device"]["allocator_gb"] = {"value": 45.0, "confidence": "M", "source": "torch's total capacity on our cards"}
    (tmp_path / "cases" / "lab.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    sim = json.loads(twin("simulate", str(tmp_path / "cases" / "s.yaml"), "--json").stdout)
    assert (sim["hbm_gb"], sim["capacity_gb"]) == (48.0, 45.0)


def _one_line(out: subprocess.CompletedProcess, *fragments: str) -> None:
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


def test_a_malformed_file_is_one_line_naming_file_and_field(tmp_path):
    raw = user_a2()
    raw["tiers"][0]["bandwidth_gbs"]["value"] = -1
    bad = write(tmp_path / "bad.yaml", raw)
    _one_line(twin("clusters", "--cluster", str(bad)), f"cluster file {bad}", "field 'tiers.0.bandwidth_gbs.value'")
    _one_line(twin("plan", "--cluster", str(bad), "--model", "tiny", "--cards", "1", "-o", str(tmp_path / "p.json")),
              "bad.yaml", "field 'tiers.0.bandwidth_gbs.value'")
    raw = user_a2()
    raw["tiers"][0]["latency_us"]["value"] = float("inf")  # read before the search, not a NaN deep inside it
    inf = write(tmp_path / "inf.yaml", raw)
    _one_line(twin("plan", "--cluster", str(inf), "--model", "tiny", "--cards", "1", "-o", str(tmp_path / "p.json")),
              "inf.yaml", "field 'tiers.0.latency_us.value': Input should be a finite number")
    raw = user_a2(hbm_gb=40.0)
    raw["device"]["allocator_gb"] = {"value": 41.0, "confidence": "M", "source": "a misread log"}
    _one_line(twin("clusters", "--cluster", str(write(tmp_path / "alloc.yaml", raw))), "alloc.yaml",
              "allocator capacity 41 GB exceeds the HBM (40 GB)")
    raw = user_a2()
    raw["device"]["curves"]["gemm"]["points"][0]["source"] = " "
    _one_line(twin("layouts", "--model", "tiny", "--cards", "1", "--cluster", str(write(tmp_path / "s.yaml", raw))),
              "field 'device.curves.gemm.points.0.source'")
    (tmp_path / "y.yaml").write_text("name: [unclosed\n")
    _one_line(twin("clusters", "--cluster", str(tmp_path / "y.yaml")), "y.yaml", "not valid YAML")
    _one_line(twin("clusters", "--cluster", str(tmp_path / "none.yaml")), "none.yaml: no such file")
    (tmp_path / "dir.yaml").mkdir()
    _one_line(twin("clusters", "--cluster", str(tmp_path / "dir.yaml")), "dir.yaml: is a directory, not a regular file")


def test_validation_of_the_structure(tmp_path):
    raw = user_a2()
    raw["node_tier"] = "nvlink"
    with pytest.raises(TwinError, match="node_tier 'nvlink' is not among the tiers"):
        load_cluster_file(write(tmp_path / "a.yaml", raw))
    raw = user_a2()
    raw["device"] = "910x"
    with pytest.raises(TwinError, match="field 'device': unknown device '910x'"):
        load_cluster_file(write(tmp_path / "b.yaml", raw))
    raw = user_a2()
    raw["device"]["kv_block_tokens"] = {"value": 12.5, "confidence": "L", "source": "a typo"}
    with pytest.raises(TwinError, match=r"kv_block_tokens 12\.5 is not a whole number of tokens >= 1"):
        load_cluster_file(write(tmp_path / "blk.yaml", raw))
    raw = user_a2()
    del raw["device"]["curves"]["attention"]
    with pytest.raises(TwinError, match="curves attention missing"):
        load_cluster_file(write(tmp_path / "c.yaml", raw))
    assert isinstance(load_cluster_file(write(tmp_path / "d.yaml", user_a2())), ClusterKind)


def test_clusters_lists_every_figure_with_its_source():
    out = twin("clusters", "--cluster", "a3")
    assert out.returncode == 0, out.stderr
    assert "sgl-kernel-npu" in out.stdout and "ep_dispatch" in out.stdout and "CloudMatrix384" in out.stdout


def test_profile_must_be_an_embedded_one(tmp_path):
    raw = user_a2()
    raw["profile"] = "tpu"
    with pytest.raises(TwinError, match="profile 'tpu' is not an embedded profile"):
        load_cluster_file(write(tmp_path / "p.yaml", raw))


def test_a_file_without_a_profile_says_how_to_name_one(tmp_path):
    raw = user_a2()
    raw.pop("profile")
    path = write(tmp_path / "p.yaml", raw)
    out = twin("plan", "--model", "qwen3-8b", "--cards", "8", "--cluster", str(path), "-o", str(tmp_path / "p.json"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "no embedded profile for cluster kind 'lab-a2'" in out.stderr and "`profile: a2`" in out.stderr
    assert not (tmp_path / "p.json").exists()
