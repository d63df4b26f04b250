"""Leave-one-case-out cross-validation: each fitting case predicted by a refit without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.crossval import leave_one_out
from calibration.errors import CalibrationError
from calibration.fit import CaseFit
from twin.evaluate import Evaluation
from twin.profile import reference_profile
from twin.scenario import load_scenario
from twin.sim.step import simulate
from twin.uncertainty import domain_of

ROOT = Path(__file__).resolve().parents[2]
CASES = ("c3-dsr1-a3-128-gloo-d2d", "c3-dsr1-a3-128-gloo-ray")
GROUPED = "grouped_gemm_efficiency_scale"


def test_leave_one_out_refits_without_each_case():
    # the start point leaves the grouped-GEMM scale an interior optimum on C3 (from the reference values it ends on
    # its lower bound with or without either case, and a refit could not be told from the joint fit)
    base = reference_profile("a3").with_values({"gemm_efficiency_scale": 0.72, "ub_efficiency_scale": 0.35}, "base")
    cases = [load_scenario(ROOT / "scenarios" / f"{n}.yaml") for n in CASES]
    fitter = CaseFit(base, cases)
    fitted = fitter.run("fitted", fitter.identify([GROUPED]), outer=1).profile
    with pytest.raises(CalibrationError, match="records no case fit"):
        leave_one_out(base, base, cases)
    with pytest.raises(CalibrationError, match="not among the cases given"):
        leave_one_out(fitted, base, cases[:1])
    cv = leave_one_out(fitted, base, cases)
    result = cv.result
    assert result.cases == list(CASES) and result.domain == domain_of(cases)
    assert {r.target.case for r in cv.rows} == set(CASES)
    step_like = [abs(r.error) for r in cv.rows if r.target.quantity in ("step", "tps_per_card", "tps_per_device")]
    assert result.step_rel_error == pytest.approx(sum(step_like) / len(step_like), abs=1e-5)
    updates = [abs(r.error) for r in cv.rows if r.target.quantity == "stage:update"]
    assert result.stages_rel_error["update"] == pytest.approx(sum(updates) / len(updates), abs=1e-5)
    for r in cv.rows:
        assert result.case_errors[r.target.case][r.target.quantity] == pytest.approx(r.error, abs=1e-5)
    # held out, a case is predicted by the refit on the other case alone, not by the joint fit
    alone = CaseFit(base, cases[1:])
    ray_only = alone.run("ray-only", alone.identify([GROUPED]), outer=1, enforce=False).profile
    assert ray_only[GROUPED] != pytest.approx(fitted[GROUPED], rel=1e-3)
    held = next(r for r in cv.rows if r.target.case == CASES[0] and r.target.quantity == "stage:update")
    assert held.predicted == pytest.approx(simulate(Evaluation(cases[0], ray_only))[0].stages_s["update"], rel=1e-6)
