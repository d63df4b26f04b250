"""The simulate result as files hold it: what older twins wrote still reads."""

import json

from twin.plan import load_plan, save_plan
from twin.planner import Planner, search
from twin.scenario import ClusterRef, Scenario


def test_a_plan_written_before_capacity_gb_loads_with_its_hbm_as_the_capacity(tmp_path):
    planner = Planner(Scenario(name="t", model="tiny", cluster=ClusterRef(kind="a3", cards=1)))
    path = tmp_path / "plan.json"
    save_plan(search(planner, 1).plan, path)
    raw = json.loads(path.read_text())
    assert raw["predictions"]["capacity_gb"] == 65.79 and raw["predictions"]["hbm_gb"] == 68.72
    del raw["predictions"]["capacity_gb"]  # as the twin wrote it until 2026-12-06, with the HBM at 64
    raw["predictions"]["hbm_gb"] = 64.0
    path.write_text(json.dumps(raw))
    assert load_plan(path).predictions.capacity_gb == 64.0
