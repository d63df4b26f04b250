"""`executor check-reshard`: the weight reshard run for real on 8 local processes (gloo), held to the twin.

The twin's figures are recomputed here from the report's own model config and layouts (not taken from
the command's comparison), so a wrong count on either side fails the test.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from executor.cli import app
from executor.errors import ExecutorError
from executor.reshard.spawn import run_ranks
from executor.reshard.tiny_model import checked_placement, raw_config, reshard_layout, shrink_config, shrunk_vocab
from twin.catalog.config import parse_config
from twin.catalog.inventory import build_inventory
from twin.cost_models.placement import Placement
from twin.cost_models.reshard import directed_chunk_bytes, reshard_stats
from twin.layout.models import Layout, RolloutLayout, TrainLayout
from twin.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
C4 = REPO / "scenarios" / "c4-dsr1-reshard-8dies.yaml"
C1 = REPO / "scenarios" / "c1-dsr1-a3-128.yaml"


def _scenario(tmp_path: Path, name: str, train: TrainLayout, rollout: RolloutLayout, model: str | None = None) -> Path:
    """C4's 8-die scenario with another layout pair (and model)."""
    base = load_scenario(C4)
    scenario = base.model_copy(update={"name": name, "model": model or base.model,
                                       "layout": Layout(train=train, rollout=rollout)})
    path = tmp_path / f"{name}.yaml"
    path.write_text(scenario.dump_yaml())
    return path


def _check_reshard(*args: str) -> subprocess.CompletedProcess:
    code = "from executor.cli import main\nmain()"
    return subprocess.run([sys.executable, "-c", code, "check-reshard", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def _twin(report: dict, method: str) -> tuple[Placement, object]:
    inv = build_inventory(parse_config(report["model_config"], "check"))
    lay = report["layouts"]
    pl = Placement(inv, TrainLayout(**lay["train"]), RolloutLayout(**lay["rollout"]), report["world"])
    return pl, reshard_stats(pl, None, method)


@pytest.mark.parametrize("pair", ["c4", "ds-tp2pp2ep2-to-tp2ep8"])
def test_moe_reshard_is_bit_exact_and_moves_the_twins_bytes(make_plan, tmp_path: Path, pair: str) -> None:
    if pair == "c4":  # DeepSeek train TP1 PP2 EP4 -> rollout EP8 (the recipes' C4)
        scenario = C4
        train, rollout = TrainLayout(tp=1, pp=2, ep=4), RolloutLayout(tp=1, dp=8, ep=8)
    else:  # expert TP 2 inside EP2 -> whole experts over EP8: packed sends
        train, rollout = TrainLayout(tp=2, pp=2, ep=2), RolloutLayout(tp=2, dp=4, ep=8)
        scenario = _scenario(tmp_path, pair, train, rollout)
    proc = _check_reshard(str(make_plan(scenario)), "--method", "both", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["world"] == 8 and report["backend"] == "gloo" and report["ok"]
    assert (report["layouts"]["train"]["tp"], report["layouts"]["train"]["pp"], report["layouts"]["train"]["ep"]) \
        == (train.tp, train.pp, train.ep)
    assert report["layouts"]["rollout"]["ep"] == rollout.ep == 8
    # vLLM cannot measure 4 data-parallel engines here: the plan's A3 engine is modelled, its shared experts TP-split
    assert report["rollout_engine_modelled"] == "vllm-ascend"
    assert not report["layouts"]["rollout"]["shared_experts_whole"]
    assert report["model_config"]["n_routed_experts"] == 256  # the expert count is kept, the sizes shrunk
    assert report["model_config"]["num_hidden_layers"] % train.pp == 0
    peaks, totals = {}, {}
    for method in ("directed", "all_gather"):
        pl, st = _twin(report, method)
        ranks = report["methods"][method]["ranks"]
        assert [r["rank"] for r in ranks] == list(range(8))
        assert all(r["bit_exact"] for r in ranks)
        assert [r["received_bytes"] for r in ranks] == st.received.tolist()
        assert [r["sent_bytes"] for r in ranks] == st.sent.tolist()
        assert [r["staging_peak_bytes"] for r in ranks] == st.extra_bytes.tolist()
        if method == "directed":  # one chunk per round: as many receive rounds as the twin counts chunks, and as
            # many all-to-all-v calls on every rank as the busiest sender or receiver has chunks
            assert [r["receive_rounds"] for r in ranks] == st.rounds.tolist()
            assert [r["rounds"] for r in ranks] == [st.collective_rounds] * 8
            assert all(r["equal_to_twin"] for r in ranks)
        assert all(0 < r["exchange_s"] < r["seconds"] for r in ranks)  # the calls, inside the rounds' time
        # each call's entry and exit: as many as the calls, in order
        for r in ranks:
            spans = r["exchange_spans"]
            assert len(spans) == r["rounds"] and all(a <= b for a, b in spans)
            assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(spans))
        peaks[method] = max(r["staging_peak_bytes"] for r in ranks)
        totals[method] = sum(r["received_bytes"] for r in ranks)
    chunk = directed_chunk_bytes(pl)
    assert chunk <= peaks["directed"] <= 2 * chunk  # one receive chunk (+ one packed send chunk)
    assert peaks["all_gather"] == 256 * chunk  # a layer's whole expert projection: every expert materialised
    assert totals["all_gather"] > totals["directed"]


def test_dense_tp4_to_tp2_table(make_plan, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "qwen25-7b-tp4pp2-to-tp2", TrainLayout(tp=4, pp=2), RolloutLayout(tp=2, dp=4),
                         model="qwen2.5-7b")
    proc = _check_reshard(str(make_plan(scenario)), "--method", "directed", "--no-engine-check")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "train TP4 PP2 -> rollout TP2 DP4" in out and "on 8 ranks (gloo, cpu" in out
    assert "directed: bytes, staging and chunks received per rank equal the twin's; every rollout shard bit-exact" \
        in out
    assert "all_gather" not in out
    assert "shrunk: " in out and "vocab_size 152064->500" in out


def test_flat_pieces_are_exactly_the_row_major_range() -> None:
    """The send/receive regions of a chunk: a few regular views whose concatenation is the element range."""
    import random

    import torch

    from executor.reshard.blocks import flat_pieces, pack, unpack

    rng = random.Random(0)
    full = torch.arange(6 * 10 * 12, dtype=torch.int32).reshape(6, 10, 12)
    for _ in range(300):
        lo = [rng.randrange(n) for n in full.shape]
        region = tuple(slice(a, rng.randrange(a + 1, n + 1)) for a, n in zip(lo, full.shape, strict=True))
        view = full[region]
        start = rng.randrange(view.numel())
        stop = rng.randrange(start + 1, view.numel() + 1)
        pieces = flat_pieces(view, start, stop)
        assert len(pieces) <= 2 * view.dim() + 1
        buf = torch.empty((stop - start) * 4, dtype=torch.uint8)
        assert torch.equal(pack(pieces, buf).view(torch.int32), view.reshape(-1)[start:stop])
        target = torch.zeros_like(full)[region]  # a strided region, as a rollout block inside its tensor
        unpack(buf, flat_pieces(target, start, stop))
        assert torch.equal(target.reshape(-1)[start:stop], view.reshape(-1)[start:stop])


def test_round_overlap_sums_each_rounds_entry_gap_and_joint_time() -> None:
    """Two ranks, three rounds, on one clock: round 1 entered at 0 and 2, left at 5 and 6 (wait 2, both 5 - 2 = 3);
    round 2 entered together at 10, left at 11 and 12 (wait 0, both 1); round 3 the second entered at 23 after the
    first had left at 22 (wait 3, both none): wait 5, both 4. Ranks with different round counts are refused."""
    from executor.npu_opt.directed_reshard_transfer import round_overlap

    first = [(0.0, 5.0), (10.0, 11.0), (20.0, 22.0)]
    second = [(2.0, 6.0), (10.0, 12.0), (23.0, 24.0)]
    assert round_overlap([first, second]) == (5.0, 4.0)
    with pytest.raises(ValueError):
        round_overlap([first, second[:2]])


def _one_line(result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("executor: error: ") and expected in lines[0], result.stderr


def test_bad_input_gets_one_line(make_plan, tmp_path: Path) -> None:
    runner = CliRunner()
    c1 = str(make_plan(C1))
    _one_line(runner.invoke(app, ["check-reshard", c1]), "the plan has 256 devices")
    _one_line(runner.invoke(app, ["check-reshard", c1, "--world", "8"]), "8 devices are not divisible by TP4 x PP8")
    _one_line(runner.invoke(app, ["check-reshard", c1, "--world", "7"]), "not a multiple of the rollout TP2")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    _one_line(runner.invoke(app, ["check-reshard", str(bad)]), "not valid JSON")
    _one_line(runner.invoke(app, ["check-reshard", str(make_plan(C4)), "--device", "npu"]),
              "torch_npu is not installed")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(raw_config("qwen2.5-7b")))  # dense: the plan's EP4 cannot cut it
    _one_line(runner.invoke(app, ["check-reshard", str(make_plan(C4)), "--model-config", str(config)]),
              "EP needs an MoE model")


def _grandchildren() -> set[int]:
    """Descendants of this process that are not its children: the ranks, which the fork server (a child) forks."""
    return {p.pid for p in psutil.Process().children(recursive=True) if p.ppid() != os.getpid()}


def test_ranks_are_stopped_when_they_overrun() -> None:
    layout = reshard_layout(Layout(train=TrainLayout(tp=1, pp=2, ep=4), rollout=RolloutLayout(tp=1, dp=8, ep=8)))
    config = shrink_config(raw_config("deepseek-r1"), layout)
    before = _grandchildren()
    with pytest.raises(ExecutorError, match=r"did not finish within 0\.05 s"):
        run_ranks({"config": config, "name": "ds", "layout": layout, "world": 8, "methods": ("directed",),
                   "seed": 0, "device": "cpu"}, timeout_s=0.05)
    assert _grandchildren() - before == set()


def test_verl_loads_the_backend_the_dry_run_selects(make_plan, build, tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from verl.checkpoint_engine.base import CheckpointEngineManager, CheckpointEngineRegistry
    from verl.utils.import_utils import import_external_libs, load_class_from_fqn

    from executor.validate import compose

    # C4's rollout EP8 from an FSDP trainer: a pair the backend feeds (C4's own Megatron trainer is refused below)
    scenario = _scenario(tmp_path, "c4-fsdp", TrainLayout(engine="fsdp"), RolloutLayout(tp=1, dp=8, ep=8))
    spec = build(make_plan(scenario), tmp_path)
    (report,) = [r for r in spec.optimizations if r.id == "directed_reshard"]
    assert report.state == "applied" and "checkpoint_engine.backend=directed" in report.detail
    rollout = compose(spec.overrides).actor_rollout_ref.rollout
    ckpt = rollout.checkpoint_engine
    import_external_libs(ckpt.custom_backend_module)  # what engine_workers.py init_model does
    kwargs = OmegaConf.to_container(ckpt.engine_kwargs)[ckpt.backend]
    engine = CheckpointEngineRegistry.new(ckpt.backend, is_master=True, bucket_size=1 << 20, **kwargs)
    assert engine.placement.devices == 8
    assert engine.placement.train.engine == "fsdp" and engine.placement.rollout.ep == 8
    manager = load_class_from_fqn(rollout.checkpoint_manager_class, "CheckpointEngineManager")
    assert issubclass(manager, CheckpointEngineManager) and manager is not CheckpointEngineManager


def test_a_layout_the_backend_cannot_feed_is_refused_before_launch_and_by_the_engine(make_plan, build,
                                                                                      tmp_path: Path) -> None:
    from verl.checkpoint_engine.base import CheckpointEngineRegistry
    from verl.utils.import_utils import import_external_libs

    from executor.npu_opt.directed_reshard_backend import BACKEND

    # a Mistral model trained with Megatron: the twin reads it, mbridge has no bridge the reader traces
    config = tmp_path / "mistral" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({**raw_config("tiny"), "model_type": "mistral",
                                  "architectures": ["MistralForCausalLM"]}))
    layout = Layout(train=TrainLayout(engine="megatron", tp=2), rollout=RolloutLayout(tp=2, dp=4))
    scenario = load_scenario(C4).model_copy(update={"name": "mistral", "model": str(config), "layout": layout})
    (tmp_path / "s.yaml").write_text(scenario.dump_yaml())
    spec = build(make_plan(tmp_path / "s.yaml"), tmp_path)
    (report,) = [r for r in spec.optimizations if r.id == "directed_reshard"]
    assert report.state == "refused" and "not mistral" in report.detail
    assert not any("checkpoint_engine" in o for o in spec.overrides)  # nothing of it reaches verl
    import_external_libs("executor.npu_opt.directed_reshard_backend")
    with pytest.raises(ExecutorError, match="not mistral"):
        CheckpointEngineRegistry.new(BACKEND, is_master=True, bucket_size=1 << 20, model=str(config),
                                     layout=layout.model_dump_json(), devices=8)


FSDP_RANKS = r'''
import asyncio, json, os, sys
from datetime import timedelta
from types import SimpleNamespace
import torch, torch.distributed as dist, transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from verl.checkpoint_engine.base import CheckpointEngineRegistry
from verl.utils.import_utils import import_external_libs

store, config_path, layout = sys.argv[1:4]
torch.set_num_threads(1)
rank = 0 if os.fork() else 1
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=timedelta(seconds=60))
torch.manual_seed(0)
config = transformers.AutoConfig.from_pretrained(config_path)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
full = {k: v.detach().clone() for k, v in model.state_dict().items()}
mesh = init_device_mesh("cpu", (2,))
for layer in model.model.layers:
    fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
import_external_libs("executor.npu_opt.directed_reshard_backend")
from executor.npu_opt.directed_reshard_backend import colocated_update_weights
ckpt = CheckpointEngineRegistry.new("directed", is_master=rank == 0, bucket_size=1 << 20, model=config_path,
                                    layout=layout, devices=2)

async def verl_naive_sync(self, global_steps=None, mode="auto"):  # how engine_workers.py reads the weights
    assert mode == "naive"
    weights, _ = self.actor.engine.get_per_tensor_param(layered_summon=False, base_sync_done=True)
    return dict(weights)

backend = SimpleNamespace(checkpoint_engine=SimpleNamespace(backend="directed"))
worker = SimpleNamespace(config=SimpleNamespace(rollout=backend), checkpoint_engine=ckpt,
                         actor=SimpleNamespace(engine=SimpleNamespace(module=model)))
got = asyncio.run(colocated_update_weights(verl_naive_sync)(worker, global_steps=1))
half = config.num_experts // 2
expected = {}
for name, w in full.items():
    base = name.rsplit(".", 1)[0]
    if name.endswith("mlp.experts.gate_up_proj"):
        for e in range(rank * half, (rank + 1) * half):
            expected[f"{base}.{e}.gate_proj.weight"], expected[f"{base}.{e}.up_proj.weight"] = w[e].chunk(2, dim=0)
    elif name.endswith("mlp.experts.down_proj"):
        expected.update({f"{base}.{e}.down_proj.weight": w[e] for e in range(rank * half, (rank + 1) * half)})
    else:
        expected[name] = w
same = lambda a, b: a.contiguous().view(torch.uint8).equal(b.contiguous().view(torch.uint8))
exact = sorted(got) == sorted(expected) and all(same(got[k], expected[k]) for k in expected)
line = json.dumps({"rank": rank, "exact": exact, "tensors": len(got), "stats": ckpt.last_stats,
                   "restored": not hasattr(worker.actor.engine, "get_per_tensor_param")})
os.write(1, (line + "\n").encode())  # one write: the two ranks' lines never interleave
dist.destroy_process_group()
if rank == 1:
    os._exit(0)
os.wait()
'''


def _two_ranks(script: str, model: str, layout: Layout, tmp_path: Path) -> tuple[list[dict], object]:
    """Run `script` on two gloo ranks over `model` shrunk to `layout`; (each rank's JSON line, the twin's
    directed reshard stats of the same placement)."""
    config = shrink_config(raw_config(model), layout)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "store"), str(path),
                           layout.model_dump_json()], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = sorted((json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")),
                   key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    st = reshard_stats(Placement(build_inventory(parse_config(config, "t")), layout.train, layout.rollout, 2), None,
                       "directed")
    return ranks, st


def test_fsdp2_shards_reach_an_expert_parallel_rollout_through_the_backend(tmp_path: Path) -> None:
    """Two gloo ranks with a real FSDP2-sharded transformers MoE model: the backend's shard source, engine and
    update_weights patch give each rank its experts (by global id) and every other tensor, bit-exact."""
    layout = reshard_layout(Layout(train=TrainLayout(engine="fsdp"), rollout=RolloutLayout(tp=1, dp=2, ep=2)))
    ranks, st = _two_ranks(FSDP_RANKS, "qwen3-30b-a3b", layout, tmp_path)
    for r in ranks:
        assert r["exact"] and r["restored"] and r["tensors"] > 2 * 64 * 3
        assert r["stats"]["received_bytes"] == st.received[r["rank"]] > 0
        assert r["stats"]["sent_bytes"] == st.sent[r["rank"]]


MEGATRON_RANKS = r'''
import json, os, sys
from datetime import timedelta
from types import SimpleNamespace
import torch, torch.distributed as dist, transformers
from executor.cpu.megatron_model import MegatronCpuModel
from executor.npu_opt.directed_reshard_backend import megatron_shards, rollout_named_tensors
from executor.npu_opt.directed_reshard_transfer import run_transfer
from executor.reshard.experts import fused_place, split_tensors
from twin.catalog.registry import load_model
from twin.cost_models.placement import Placement
from twin.layout.models import Layout

store, config_path, layout = sys.argv[1:4]
torch.set_num_threads(1)
rank = 0 if os.fork() else 1
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=timedelta(seconds=60))
config = json.loads(open(config_path).read())
torch.manual_seed(0)
hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(config_path),
                                                    dtype=torch.bfloat16)
full = split_tensors({k: v.detach().clone() for k, v in hf.state_dict().items()})  # experts one by one, as on disk
lay = Layout.model_validate_json(layout)
model = MegatronCpuModel.build(config, tp=lay.train.tp, pp=1, ep=lay.train.ep, etp=lay.train.expert_tp,
                               dtype=torch.bfloat16)
model.load(full)
engine = SimpleNamespace(module=[model.model], bridge=model.bridge, vanilla_bridge=True)  # verl's Megatron engine
pl = Placement(load_model(config_path), lay.train, lay.rollout, 2)
result = run_transfer(pl, "directed", rank, 2, megatron_shards(engine, pl))
got = dict(rollout_named_tensors(pl, result.rollout))
shapes = {k: tuple(v.shape) for k, v in full.items()}
def needed(name):  # every tensor at rollout TP1; of the experts, those of this rank's EP partition
    place = fused_place(name, shapes)
    if place is None:
        return True
    (first, stop), *_ = pl.rollout_blocks(pl.inv.by_name[place[0]], rank)[0]
    return first <= place[1] < stop
expected = {k: v for k, v in full.items() if needed(k)}
same = lambda a, b: a.contiguous().view(torch.uint8).equal(b.contiguous().view(torch.uint8))
exact = sorted(got) == sorted(expected) and all(same(got[k], expected[k]) for k in expected)
os.write(1, (json.dumps({"rank": rank, "exact": exact, "tensors": len(got), "stats": result.stats.as_dict()})
             + "\n").encode())
dist.destroy_process_group()
if rank == 1:
    os._exit(0)
os.wait()
'''


def test_megatron_shards_reach_a_tp1_rollout_through_the_backends_reader(tmp_path: Path) -> None:
    """Two gloo ranks with a real Megatron-core TP2 model loaded through mbridge: the backend's Megatron reader
    (as for verl's engine: module chunks and the mbridge bridge) feeds the directed reshard, and each rollout
    rank gets every HF tensor whole, bit-exact, having received the twin's bytes."""
    pytest.importorskip("megatron.core")
    pytest.importorskip("mbridge")
    layout = reshard_layout(Layout(train=TrainLayout(tp=2), rollout=RolloutLayout(tp=1, dp=2)))
    ranks, st = _two_ranks(MEGATRON_RANKS, "qwen2.5-7b", layout, tmp_path)
    for r in ranks:
        assert r["exact"] and r["tensors"] == 3 + 2 * 12  # embedding, norm, head; 12 tensors per layer
        assert r["stats"]["received_bytes"] == st.received[r["rank"]] > 0
        assert r["stats"]["sent_bytes"] == st.sent[r["rank"]]


@pytest.mark.parametrize(("ep", "etp"), [(2, 1), (1, 2)])
def test_megatron_moe_shards_reach_an_expert_parallel_rollout_through_the_backends_reader(tmp_path: Path, ep: int,
                                                                                          etp: int) -> None:
    """The same with a Qwen3-MoE from Megatron-core TP2, its experts over EP2 (expert TP1) or split by expert TP2:
    mbridge's one-by-one experts are stacked into the plan's fused expert blocks, and each rollout rank of TP1 EP2
    gets its half of the experts (by checkpoint name) and every other tensor, bit-exact, having received the twin's
    bytes."""
    pytest.importorskip("megatron.core")
    pytest.importorskip("mbridge")
    layout = reshard_layout(Layout(train=TrainLayout(tp=2, ep=ep, etp=etp), rollout=RolloutLayout(tp=1, dp=2, ep=2)))
    ranks, st = _two_ranks(MEGATRON_RANKS, "qwen3-30b-a3b", layout, tmp_path)
    for r in ranks:
        # embedding, norm, head; per layer 9 tensors (q k v o, q/k norms, router, 2 norms) and 64 experts x 3
        assert r["exact"] and r["tensors"] == 3 + 2 * (9 + 64 * 3)
        assert r["stats"]["received_bytes"] == st.received[r["rank"]] > 0
        assert r["stats"]["sent_bytes"] == st.sent[r["rank"]]


def test_a_tp2_rollout_gets_its_blocks_named_with_the_block() -> None:
    """Whole tensors keep their names; TP-split blocks travel as `name#block=...`, which the vLLM side parses
    back (executor/reshard/vllm_blocks.py; the vLLM load itself is checked by check-reshard's probe)."""
    import torch

    from executor.npu_opt.directed_reshard_backend import rollout_named_tensors
    from executor.reshard.vllm_blocks import parse_block_name

    layout = reshard_layout(Layout(train=TrainLayout(tp=2), rollout=RolloutLayout(tp=2, dp=1)))
    config = shrink_config(raw_config("qwen2.5-7b"), layout)
    pl = Placement(build_inventory(parse_config(config, "t")), layout.train, layout.rollout, 2)
    rollout = {t.name: [(b, torch.zeros(tuple(hi - lo for lo, hi in b))) for b in pl.rollout_blocks(t, 1)]
               for t in pl.tensors}
    named = list(rollout_named_tensors(pl, rollout))
    parsed = {name: parse_block_name(name) for name, _ in named}
    whole = sorted(n for n, p in parsed.items() if p is None)
    assert whole == sorted(t.name for t in pl.tensors if t.shard.tp_dim is None)  # the norms
    split = {p[0]: p[1] for p in parsed.values() if p is not None}
    assert split == {t.name: pl.rollout_blocks(t, 1)[0] for t in pl.tensors if t.shard.tp_dim is not None}
    assert split["model.embed_tokens.weight"] == ((256, 500), (0, 64))  # 500 padded to 512 (64s): rows 256-511


def test_the_shrunk_vocabulary_splits_unpadded_over_every_tp_and_is_padded_by_vllm() -> None:
    # 500 = 4 x 125 up to a unit of 4; 504 = 8 x 63; 16 x 32 = 512 is a multiple of vLLM's 64, so 16 x 33 = 528;
    # 32 x 16 = 512 likewise, so 32 x 17 = 544; a unit of 64 cannot avoid 64's multiples: 512
    assert [shrunk_vocab(u) for u in (1, 2, 4, 8, 16, 32, 64)] == [500, 500, 500, 504, 528, 544, 512]
    layout = reshard_layout(Layout(train=TrainLayout(tp=8), rollout=RolloutLayout(tp=2, dp=4)))
    config = shrink_config(raw_config("qwen2.5-7b"), layout)
    assert config["vocab_size"] == 504
    pl = checked_placement(config, "qwen2.5-7b", layout, 8)  # the layout rules pass: TP8 divides 504
    head = next(t for t in pl.tensors if t.name == "lm_head.weight")
    assert [pl.train_blocks(head, d)[0][0] for d in range(8)] == [(63 * d, 63 * (d + 1)) for d in range(8)]
    assert [pl.rollout_blocks(head, d)[0][0] for d in range(2)] == [(0, 256), (256, 504)]  # 504 padded to 512


def test_the_v1_trainers_naive_sync_goes_through_the_backend_in_workers_configured_with_it(monkeypatch,
                                                                                              tmp_path: Path) -> None:
    """verl 0.9.1's V1 trainer forces its manager's backend to "naive" (trainer/ppo/v1/trainer_base.py): a worker
    configured with the directed backend still syncs through it, and writes the sync's timings where the run says;
    one configured with naive keeps verl's export."""
    import asyncio
    from types import SimpleNamespace

    from executor.npu_opt import directed_reshard_backend as backend
    from executor.npu_opt.worker_hook_env import SYNC_TIMINGS_ENV

    monkeypatch.setenv(SYNC_TIMINGS_ENV, str(tmp_path / "sync_timings"))
    sent = []
    monkeypatch.setattr(backend, "fsdp_shards", lambda engine, pl: {"from": "trainer shards"})
    ckpt = SimpleNamespace(placement=None, send_weights=sent.append, receive_weights=lambda: iter([("w", 0)]),
                           last_stats={"rank": 0, "received_bytes": 64, "transfer_s": 0.0})
    engine = SimpleNamespace()
    sync = SimpleNamespace(backend=backend.BACKEND)
    worker = SimpleNamespace(config=SimpleNamespace(rollout=SimpleNamespace(checkpoint_engine=sync)),
                             checkpoint_engine=ckpt, actor=SimpleNamespace(engine=engine))

    async def verl_update_weights(self, global_steps=None, mode="auto"):  # verl's naive sequence reads the export
        assert mode == "naive"
        weights, _ = self.actor.engine.get_per_tensor_param(layered_summon=False, base_sync_done=True)
        return dict(weights)

    patched = backend.colocated_update_weights(verl_update_weights)
    assert asyncio.run(patched(worker, global_steps=1, mode="naive")) == {"w": 0}
    assert sent == [{"from": "trainer shards"}] and not hasattr(engine, "get_per_tensor_param")
    (timings,) = (tmp_path / "sync_timings").iterdir()
    (row,) = map(json.loads, timings.read_text().splitlines())  # one line a sync, this process's file
    assert timings.name.endswith(f"-{os.getpid()}.jsonl") and (row["step"], row["rank"], row["received_bytes"]) == (
        1, 0, 64)
    assert 0 <= row["shards_s"] <= row["worker_s"] and row["transfer_s"] == 0.0
    sync.backend = "naive"
    engine.get_per_tensor_param = lambda **_: (iter([("x", 1)]), None)
    assert asyncio.run(patched(worker, global_steps=2, mode="naive")) == {"x": 1} and len(sent) == 1
    assert len(timings.read_text().splitlines()) == 1  # verl's own export is not the backend's to time
