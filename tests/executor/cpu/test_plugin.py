"""The plugin inside a fresh verl process: platform, backend fix, engine registrations, start-up heap freezes."""

from __future__ import annotations

from executor.cpu.names import PLATFORM_NAME, PLUGIN_MODULE

PROBE = r"""
import json, os, socket
import torch, torch.distributed as dist
from omegaconf import OmegaConf
from verl.utils.device import (auto_set_device, get_device_id, get_device_name, get_nccl_backend,
                               get_resource_name, get_torch_device)
from verl.utils.distributed import initialize_global_process_group_ray

out = {"device": get_device_name(), "backend": get_nccl_backend(), "resource": get_resource_name(),
       "device_id": get_device_id()}
dev = get_torch_device()
dev.empty_cache(); dev.synchronize()
out["allocated"] = dev.memory_allocated()
out["peak"] = dev.max_memory_allocated()
out["mem_info"] = list(dev.mem_get_info())
cfg = OmegaConf.create({"trainer": {"device": "cpu"}})
auto_set_device(cfg)
out["trainer_device"] = cfg.trainer.device
out["engine_loaded_early"] = "verl.workers.engine.fsdp.transformer_impl" in __import__("sys").modules

from verl.workers.engine.base import EngineRegistry
import verl.workers.engine  # noqa: F401  (imports the FSDP engines, which fires the registration)
out["engine"] = EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__
out["value_engine"] = EngineRegistry.get_engine_cls("value_model", "fsdp").__name__
from verl.single_controller.base.decorator import MAGIC_ATTR
from verl.workers.engine_workers import ActorRolloutRefWorker
init_model = ActorRolloutRefWorker.init_model
out["init_model"] = [init_model.__code__.co_name, str(getattr(init_model, MAGIC_ATTR)["dispatch_mode"])]
import transfer_queue
out["tq_init"] = transfer_queue.init.__code__.co_name
from verl.trainer.ppo.v1.trainer_base import PPOTrainer
out["fit"] = PPOTrainer.fit.__code__.co_name

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
initialize_global_process_group_ray()  # builds "cpu:gloo,cpu:gloo"
t = torch.ones(3)
dist.all_reduce(t)
out["all_reduce"] = t.tolist()
out["pg_backend"] = str(dist.get_backend())
dist.destroy_process_group()
print("PROBE " + json.dumps(out))
"""


def test_plugin_makes_verl_run_on_cpu(run_probe) -> None:
    out = run_probe(PROBE, {"VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE, "VERL_PLATFORM": PLATFORM_NAME})
    assert (out["device"], out["backend"], out["resource"], out["device_id"]) == ("cpu", "gloo", "GPU", "cpu")
    assert out["trainer_device"] == "cpu"
    assert out["allocated"] > 0 and out["peak"] >= out["allocated"]
    free, total = out["mem_info"]
    assert 0 < free <= total
    assert not out["engine_loaded_early"], "the plugin must not import the engines itself"
    assert (out["engine"], out["value_engine"]) == ("FSDPEngineWithLMHead", "FSDPEngineWithValueHead")
    # the trainer's worker freezes its start-up heap after init_model, still registered as verl dispatches it
    assert out["init_model"][0] == "frozen_around" and "ONE_TO_ALL" in out["init_model"][1]
    assert out["tq_init"] == "init_then_freeze_storage"  # the driver's TransferQueue units freeze theirs too
    assert out["fit"] == "frozen_around"  # and the driver its own before the trainer's first step
    assert out["all_reduce"] == [1.0, 1.0, 1.0] and out["pg_backend"] in ("gloo", "cpu:gloo")
