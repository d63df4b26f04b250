"""The trainer's first touches of host-returned pages after the rollout, pass by pass."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from twin.cost_models.host_pages import RETURNED_PAGE_TERM, returned_page_seconds
from twin.evaluate import Evaluation
from twin.profile import embedded_profile
from twin.scenario import load_scenario
from twin.sim.step import StepSimulation

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"
MB = 1 << 20


@dataclass
class Activations:
    """A TrainMemory's activation figures, as allocated, per pipeline stage."""

    log_prob: tuple[float, ...]
    update: tuple[float, ...]
    value_model: Activations | None = None  # PPO's critic

    @property
    def n_stages(self) -> int:
        return len(self.update)

    def log_prob_activation_bytes(self, stage: int, fragmented: bool = True) -> float:
        assert not fragmented
        return self.log_prob[stage]

    def update_activation_bytes(self, stage: int, fragmented: bool = True) -> float:
        assert not fragmented
        return self.update[stage]


def _cpu(us: float):
    return embedded_profile("cpu").with_values({RETURNED_PAGE_TERM: us}, "test")


def _scenario(**changes):
    sc = load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml")
    workload = sc.workload.model_copy(update={k: v for k, v in changes.items() if k == "use_kl_loss"})
    optimizations = changes.get("optimizations", sc.optimizations)
    return sc.model_copy(update={"workload": workload, "optimizations": optimizations})


def test_bypassed_log_probs_leave_every_page_to_the_update():
    # 256 MiB of update activations = 65,536 pages at 5 us: 0.32768 s
    sc = _scenario(optimizations=("skip_old_log_prob",), use_kl_loss=False)
    seconds = returned_page_seconds(sc, _cpu(5.0), Activations((64 * MB,), (256 * MB,)))
    assert seconds == {"old_log_prob": 0.0, "ref": 0.0, "update": pytest.approx(65536 * 5e-6, rel=1e-12)}


def test_a_log_prob_pass_first_touches_its_own_and_the_update_only_the_rest():
    # old_log_prob 64 MiB (16,384 pages x 4 us = 0.065536 s); the reference pass reuses them; the update touches
    # 256 - 64 = 192 MiB anew (49,152 pages: 0.196608 s)
    sc = _scenario(optimizations=(), use_kl_loss=True)
    seconds = returned_page_seconds(sc, _cpu(4.0), Activations((64 * MB,), (256 * MB,)))
    assert seconds["old_log_prob"] == pytest.approx(16384 * 4e-6, rel=1e-12)
    assert seconds["ref"] == 0.0
    assert seconds["update"] == pytest.approx(49152 * 4e-6, rel=1e-12)


def test_a_critic_touches_what_its_passes_need_beyond_the_actors_before_them():
    # PPO: old_log_prob 64 MiB (16,384 pages at 2 us); the critic's values pass 80 MiB (4,096 more pages), its update
    # 200 MiB (30,720 more), then the actor's update 256 MiB (14,336 more)
    sc = _scenario(optimizations=(), use_kl_loss=False)
    critic = Activations((80 * MB,), (200 * MB,))
    seconds = returned_page_seconds(sc, _cpu(2.0), Activations((64 * MB,), (256 * MB,), critic))
    assert seconds == {"old_log_prob": pytest.approx(16384 * 2e-6, rel=1e-12), "ref": 0.0,
                       "values": pytest.approx(4096 * 2e-6, rel=1e-12),
                       "update_critic": pytest.approx(30720 * 2e-6, rel=1e-12),
                       "update": pytest.approx(14336 * 2e-6, rel=1e-12)}


def test_the_busiest_pipeline_stage_sets_the_pages():
    # stages fault in parallel: the largest of 100 / 300 MiB, 76,800 pages at 1 us
    sc = _scenario(optimizations=("skip_old_log_prob",), use_kl_loss=False)
    seconds = returned_page_seconds(sc, _cpu(1.0), Activations((10 * MB, 30 * MB), (100 * MB, 300 * MB)))
    assert seconds["update"] == pytest.approx(76800e-6, rel=1e-12)


def test_a_profile_without_the_term_pays_nothing():
    sc = _scenario()
    assert returned_page_seconds(sc, embedded_profile("a3"), Activations((MB,), (MB,))) == {}


def test_the_simulation_and_the_closed_form_add_the_same_pages():
    sc = load_scenario(SCENARIOS / "cpu-tiny-grpo.yaml")
    with_pages, without = Evaluation(sc, _cpu(6.0)), Evaluation(sc, _cpu(0.0))
    pages = returned_page_seconds(sc, with_pages.profile, with_pages.train_memory)["update"]
    assert pages == pytest.approx(with_pages.train_memory.update_activation_bytes(0, fragmented=False) / 4096 * 6e-6)
    simulated = [StepSimulation(ev).run(1)[0].stages_s["update"] for ev in (with_pages, without)]
    closed = [ev.analytical().stages_s["update"] for ev in (with_pages, without)]
    assert simulated[0] - simulated[1] == pytest.approx(pages, rel=1e-9)
    assert closed[0] - closed[1] == pytest.approx(pages, rel=1e-9)
