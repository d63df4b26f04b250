"""Shipped profiles (twin/profiles/*.yaml): every value and every bound has a source, and a case-fitted
profile frees no more than its recorded fit could identify and leaves no freed value on a bound."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from twin.profile import FitRecord, Param, Profile, load_profile

GROUPED, MEMORY = "grouped_gemm_efficiency_scale", "memory_efficiency_scale"
SHIPPED = sorted(p.name for p in resources.files("twin").joinpath("profiles").iterdir() if p.name.endswith(".yaml"))


def _profile(name: str) -> Profile:
    return load_profile(str(resources.files("twin").joinpath("profiles", name)))


def problems(profile: Profile) -> list[str]:
    """What makes a profile dishonest (DESIGN section 7); empty when it passes."""
    out = [f"{n}: no source" for n, p in profile.params.items() if not p.source.strip()]
    out += [f"{n}: bounds without a source" for n, p in profile.params.items()
            if p.bounds is not None and not (p.bounds_source or "").strip()]
    record = profile.provenance.fit
    case_fitted = [n for n, p in profile.params.items() if p.fitted and "job" not in p.source]
    if case_fitted and record is None:
        out.append(f"fitted without a recorded fit: {', '.join(case_fitted)}")
    if record is not None:
        s = record.singular_values
        identified = sum(1 for v in s if s and v >= record.relative_threshold * s[0])
        if identified != record.identifiable:
            out.append(f"records {record.identifiable} identified directions, its singular values give {identified}")
        if len(record.freed) > identified:
            out.append(f"frees {len(record.freed)} parameters, the data identifies {identified}")
        out += [f"{n}: moves {record.moved.get(n, 0)} distinct numbers" for n in record.freed
                if record.moved.get(n, 0) < 3]
        out += [f"{n}: fitted but not freed by the recorded fit" for n in case_fitted if n not in record.freed]
        for n in record.freed:
            p = profile.params[n]
            assert p.bounds is not None
            lo, hi = p.bounds
            if min(p.value - lo, hi - p.value) <= 1e-4 * (hi - lo):
                out.append(f"{n}: value {p.value:g} on its bound {p.bounds}")
    return out


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_is_honest(name):
    assert problems(_profile(name)) == []


def _fitted(**record) -> Profile:
    base = _profile("a3-reference.yaml")
    params = dict(base.params)
    params[GROUPED] = params[GROUPED].model_copy(update={"fitted": True})
    fit = FitRecord(**{"freed": [GROUPED], "distinct_targets": 5,
                       "moved": {GROUPED: 4}, "singular_values": [1.0],
                       "relative_threshold": 0.05, "identifiable": 1, **record})
    return base.model_copy(update={"params": params, "provenance": base.provenance.model_copy(update={"fit": fit})})


def test_the_check_fails_for_each_kind_of_dishonesty():
    assert problems(_fitted()) == []
    assert problems(_fitted(singular_values=[1.0, 0.01], freed=[GROUPED, MEMORY],
                            moved={GROUPED: 4, MEMORY: 3})) == [
        "frees 2 parameters, the data identifies 1"]
    assert problems(_fitted(moved={GROUPED: 2})) == [
        f"{GROUPED}: moves 2 distinct numbers"]
    base = _profile("a3-reference.yaml")
    on_bound = _fitted()
    on_bound.params[GROUPED] = on_bound.params[GROUPED].model_copy(
        update={"value": 1.1})
    assert problems(on_bound) == [f"{GROUPED}: value 1.1 on its bound (0.3, 1.1)"]
    unsourced = base.model_copy(update={"params": {**base.params, "x": Param(value=1, unit="s", source=" ",
                                                                           bounds=(0, 2))}})
    assert problems(unsourced) == ["x: no source", "x: bounds without a source"]
    no_record = _fitted().model_copy(update={"provenance": base.provenance})
    assert problems(no_record) == [f"fitted without a recorded fit: {GROUPED}"]


def test_with_values_marks_only_what_moved():
    base = _profile("a3-reference.yaml")
    child = base.with_values({MEMORY: base[MEMORY], GROUPED: 0.5}, "child")
    assert not child.params[MEMORY].fitted
    assert child.params[GROUPED].fitted and child[GROUPED] == 0.5
    assert child.parent == base.id


def test_a_profile_of_another_cluster_kind_is_refused_in_one_line():
    import subprocess
    import sys

    from twin.disaggregated import SyncEvaluation
    from twin.errors import TwinError
    from twin.evaluate import Evaluation
    from twin.profile import embedded_profile
    from twin.scenario import load_scenario

    scenarios = Path(__file__).resolve().parents[2] / "scenarios"
    a3 = embedded_profile("a3")
    with pytest.raises(TwinError, match="profile a3-fit-26 is for cluster kind a3, not h20"):
        Evaluation(load_scenario(scenarios / "c8-grpo-dsv3-h20-96.yaml"), a3)
    with pytest.raises(TwinError, match="not h20"):
        SyncEvaluation(load_scenario(scenarios / "c9-qwen3-30b-a3b-h20-16-16-per-tensor.yaml"), a3)
    out = subprocess.run([sys.executable, "-m", "twin", "simulate", str(scenarios / "c8-grpo-dsv3-h20-96.yaml"),
                          "--profile", str(Path(__file__).resolve().parents[2] / "twin" / "profiles" / "a3.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert out.stderr.startswith("twin: error: profile a3-fit-26 is for cluster kind a3, not h20")
