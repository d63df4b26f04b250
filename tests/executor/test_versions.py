"""What a plan assumed of the software against what the installed verl runs."""

from __future__ import annotations

import pytest

from executor.versions import software_differences
from twin.scenario import LAUNCHED_VERL, Software


@pytest.mark.parametrize(("software", "differences"), [
    (Software(), 0),  # unset: nothing stated to disagree with
    (Software(verl=LAUNCHED_VERL, rollout_poll=True), 0),  # the planner's default
    (Software(verl="0.9.0"), 0),  # the same release line
    (Software(verl="0.6.0"), 1),  # C8: another dispatch and no sync through the server
    (Software(weights_kept_for_sync=True), 1),  # C1-C4: the DeepSeek recipe's patch
    (Software(verl="0.7.0", weights_kept_for_sync=True), 2),
])
def test_a_plan_for_other_software_is_named_before_the_launch(software: Software, differences: int) -> None:
    assert len(software_differences(software, "0.9.1")) == differences
