"""The overhead job's grid, the poll interval it reads from verl's code, and the framework terms the fit reads off
its verl points (its Ray calls and verl's own code run in the CPU loop)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from calibration.fit_jobs import JobFit, call_and_slope
from calibration.jobs import load_job
from calibration.jobs.overhead import poll_interval
from calibration.jobs.verl_driver import answer_tokens
from calibration.measurements import DeviceFacts, HostFacts, JobMeasurement, Stats, Versions
from twin.profile import embedded_profile


def test_points_cover_every_group_size_and_payload_then_verls_path_per_batch_size(cpu_ctx):
    points = load_job("overhead").points(cpu_ctx)
    per_size = [[("agent_loop", {"agent_workers": 1, "responses": r}), ("old_log_prob_bypass", {"responses": r}),
                 ("advantage", {"responses": r}),
                 ("update_actor", {"workers": 2, "responses": r, "micro_per_rank": 48})] for r in (96, 384, 768)]
    assert [(p.op, p.params) for p in points] == [
        ("worker_call", {"workers": 1}), ("worker_call", {"workers": 2}),
        ("worker_call_data", {"workers": 2, "payload_mb": 1}), ("worker_call_data", {"workers": 2, "payload_mb": 16}),
        ("rollout_poll", {"source": "verl code"}), *per_size[0], *per_size[1], *per_size[2]]


def test_the_poll_interval_comes_from_verl():
    value, where = poll_interval()
    assert value == 2.0  # verl 0.9.1: ReplayBuffer(poll_interval=2.0)
    assert where.split(":")[0].endswith("replay_buffer.py")


def test_the_echo_servers_answers_repeat_or_cut_its_words_to_each_length_then_end():
    words, end = [11, 12, 13], 99
    assert answer_tokens(words, end, 1) == [99]
    assert answer_tokens(words, end, 3) == [11, 12, 99]
    assert answer_tokens(words, end, 8) == [11, 12, 13, 11, 12, 13, 11, 99]
    with pytest.raises(ValueError):
        answer_tokens(words, end, 0)


def test_call_and_slope_is_a_line_kept_non_negative():
    assert call_and_slope([96, 384], [0.02 + 96 * 1e-4, 0.02 + 384 * 1e-4]) == pytest.approx((0.02, 1e-4))
    # a negative intercept is not a call's cost: the line through the origin takes over
    call, slope = call_and_slope([100, 200], [0.9, 2.1])
    assert call == 0.0 and slope == pytest.approx((100 * 0.9 + 200 * 2.1) / (100**2 + 200**2))


def _record(op: str, params: dict, seconds: float, prompt: float = 39.0, response: float = 7.0,
            host_cpu_s: float | None = None, handed_s: float | None = None) -> JobMeasurement:
    n = params["responses"]
    busy = {} if host_cpu_s is None else {"host_cpu_s": host_cpu_s / seconds}
    busy |= {} if handed_s is None else {"handed_s": handed_s / seconds}
    return JobMeasurement(
        key=f"overhead|{op}|{params}", job="overhead", timestamp=datetime.now(timezone.utc), op=op, params=params,
        stats=Stats.from_samples([seconds] * 3, warmup=1),
        derived={"responses": n / seconds, "prompt_tokens": n * prompt / seconds,
                 "response_tokens": n * response / seconds, **busy},
        device=DeviceFacts(kind="cpu", name="test-cpu", count=1, threads=1),
        host=HostFacts(hostname="h", cpu_model="c", cores=2, memory_gb=24.0), versions=Versions(python="3.11"))


def test_fit_reads_the_agent_loop_and_driver_stage_terms_off_verls_points():
    records = [_record("agent_loop", {"agent_workers": 1, "responses": 96}, 1.2),
               _record("agent_loop", {"agent_workers": 1, "responses": 384}, 4.8),
               _record("agent_loop", {"agent_workers": 2, "responses": 384}, 3.0),  # not the CPU target's count
               _record("old_log_prob_bypass", {"responses": 96}, 0.010 + 96 * 1e-4),
               _record("old_log_prob_bypass", {"responses": 384}, 0.010 + 384 * 1e-4),
               _record("advantage", {"responses": 96}, 0.020 + 96 * 2e-4),
               _record("advantage", {"responses": 384}, 0.020 + 384 * 2e-4)]
    profile = JobFit(embedded_profile("cpu"), records, "fp32").run("overhead", ["synthetic"]).profile
    # through the origin: (96 x 1.2 + 384 x 4.8) / (96^2 + 384^2) = 1958.4 / 156672 = 12.5 ms per response
    assert profile["agent_loop_s_per_response"] == pytest.approx(0.0125, rel=1e-12)
    assert profile["bypass_log_prob_call_s"] == pytest.approx(0.010, abs=1e-12)
    assert profile["bypass_log_prob_s_per_response"] == pytest.approx(1e-4, rel=1e-9)
    assert profile["advantage_call_s"] == pytest.approx(0.020, abs=1e-12)
    assert profile["advantage_s_per_response"] == pytest.approx(2e-4, rel=1e-9)
    assert "calibration overhead job" in profile.params["advantage_call_s"].source
    assert profile["agent_loop_busy_cores"] == 0.0  # no host CPU measured: the placeholder stays
    assert profile["agent_loop_arrival_share"] == 1.0  # no hand-over timed: the placeholder stays


def test_fit_reads_the_cores_the_agent_loop_keeps_busy_and_the_hosts_cores():
    records = [_record("agent_loop", {"agent_workers": 1, "responses": 96}, 1.2, host_cpu_s=1.8),  # 1.5 cores
               _record("agent_loop", {"agent_workers": 1, "responses": 384}, 4.8, host_cpu_s=8.16),  # 1.7
               _record("agent_loop", {"agent_workers": 1, "responses": 768}, 9.6, host_cpu_s=15.36)]  # 1.6
    profile = JobFit(embedded_profile("cpu"), records, "fp32").run("overhead", ["synthetic"]).profile
    assert profile["agent_loop_busy_cores"] == pytest.approx(1.6, rel=1e-12)  # the median
    assert profile["host_cores"] == 2.0  # the records' host
    assert "median of 3 points (1.50-1.70)" in profile.params["agent_loop_busy_cores"].source


def test_fit_reads_the_share_of_the_agent_loops_time_before_its_last_hand_over():
    records = [_record("agent_loop", {"agent_workers": 1, "responses": 96}, 1.2, host_cpu_s=1.8, handed_s=0.96),
               _record("agent_loop", {"agent_workers": 1, "responses": 384}, 4.8, host_cpu_s=8.16, handed_s=3.6),
               _record("agent_loop", {"agent_workers": 1, "responses": 768}, 9.6, host_cpu_s=15.36, handed_s=7.2)]
    profile = JobFit(embedded_profile("cpu"), records, "fp32").run("overhead", ["synthetic"]).profile
    # 0.96 / 1.2 = 0.80, 3.6 / 4.8 = 0.75, 7.2 / 9.6 = 0.75: the median
    assert profile["agent_loop_arrival_share"] == pytest.approx(0.75, rel=1e-12)
    assert "median of 3 points (0.75-0.80)" in profile.params["agent_loop_arrival_share"].source


def test_fit_of_update_actor_recovers_the_terms_beyond_the_twins_passes():
    """Timings the twin generated (its update stage with the terms at 0, plus 50 ms a call and 2 ms a response)
    give those terms back."""
    base = embedded_profile("cpu")
    params = [{"workers": 2, "responses": r, "micro_per_rank": 48} for r in (96, 384)]
    probe = JobFit(base, [], "fp32")
    twin = [probe._twin_update(base, _record("update_actor", p, 1.0)) for p in params]
    records = [_record("update_actor", p, t + 0.05 + p["responses"] * 0.002) for p, t in zip(params, twin, strict=True)]
    profile = JobFit(base, records, "fp32").run("overhead", ["synthetic"]).profile
    assert profile["update_call_s"] == pytest.approx(0.05, rel=1e-6)
    assert profile["update_s_per_response"] == pytest.approx(0.002, rel=1e-6)


def test_the_harness_update_pays_no_host_returned_pages():
    """The overhead job's update_actor faults pages the guest holds (benchmarks/verl_update_cpu.py: under 3 us a
    fault): its terms come out the same whatever the profile charges a loop's update for host-returned pages."""
    base = embedded_profile("cpu")
    params = [{"workers": 2, "responses": r, "micro_per_rank": 48} for r in (96, 384)]
    twin = [JobFit(base, [], "fp32")._twin_update(base, _record("update_actor", p, 1.0)) for p in params]
    records = [_record("update_actor", p, t + 0.05 + p["responses"] * 0.002) for p, t in zip(params, twin, strict=True)]
    paying = base.with_values({"host_returned_page_us": 6.0}, base.id)
    profile = JobFit(paying, records, "fp32").run("overhead", ["synthetic"]).profile
    assert profile["update_call_s"] == pytest.approx(0.05, rel=1e-6)
    assert profile["update_s_per_response"] == pytest.approx(0.002, rel=1e-6)


def test_one_batch_size_leaves_a_stages_terms_at_their_base_values():
    records = [_record("advantage", {"responses": 384}, 0.1)]
    out = JobFit(embedded_profile("cpu"), records, "fp32")
    with pytest.raises(ValueError, match="no job measurement"):
        out.run("overhead", ["synthetic"])
    assert any("advantage at one batch size" in n for n in out.notes)
