"""verl's own rollout, driver and update code on this host, with only the generation engine left out.

The overhead job times the framework around the models with this: in a Ray session it started, the project's
tiny model and maths data (executor/cpu/assets.py), verl's trainer config (its `ppo_trainer` defaults and the
CPU target's overrides, executor/cpu/launch.py), TransferQueue, verl's reward-loop workers (the project's MATH
reward), verl's load balancer and LLM-server client, and the V1 trainer's `AgentLoopManagerTQ`. The server
behind the client answers every request at once with a short answer of varied length, so a timed batch is verl's
per-request path alone: the agent loop (chat template, Continuous Token), the routed call to the server,
the reward-loop call, the TransferQueue writes. The trainer's own stage methods (bypass-mode old_log_prob,
advantage, update_actor) then run on the samples the agent loop left in TransferQueue, the update on verl's
FSDP2 actor worker group over the trainer ranks.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ANSWER = "The answer is 4"  # the echo server's words, repeated or cut to each answer's length
# tokens per answer with its end token, drawn uniformly (mean 6.5): the CPU loop's responses are 2-3 to 9-14 tokens,
# mean 5.3-6.6 a step (its metrics, 2026-12-05). Equal lengths made verl's bypass old_log_prob 5-6 ms faster at 512
# responses than these, with the same mean (54.5 / 56.3 ms against 60.4 / 60.8 ms, two alternations, 2026-12-06):
# verl's TransferQueue reads and writes of jagged fields cost more than of equal ones
ANSWER_TOKENS = (2, 11)
ANSWER_SEED = 0
POLL_S = 0.025  # how often the harness reads TransferQueue's tags while it waits for a batch to finish
BATCH_TIMEOUT_S = 600.0


def _compose(overrides: list[str]) -> Any:
    """verl's trainer config from its packaged defaults and `overrides`, resolved, with TransferQueue on."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        config = compose("ppo_trainer", overrides=overrides)
    with open_dict(config):
        config.transfer_queue.enable = True
    OmegaConf.resolve(config)
    return config


def answer_tokens(words: list[int], end: int, length: int) -> list[int]:
    """An answer of `length` tokens: `words` repeated or cut to `length` - 1 tokens, then `end`."""
    if length < 1 or not words:
        raise ValueError(f"an answer needs at least its end token and one word to repeat, not {length} / {words}")
    return [*(words * (length // len(words) + 1))[:length - 1], end]


def _echo_server(words: list[int], end: int) -> Any:
    """A Ray actor with the rollout server's `generate`, answering at once (verl's TokenOutput) with an answer of
    ANSWER_TOKENS' seeded lengths, that remembers when the last request reached it (`last_request`, the host's
    clock)."""
    import random

    import ray
    from verl.workers.rollout.replica import TokenOutput

    class EchoServer:
        def __init__(self) -> None:
            self.last = 0.0
            self.lengths = random.Random(ANSWER_SEED)

        async def generate(self, prompt_ids: list[int], sampling_params: dict, request_id: str, **kw: Any) -> Any:
            self.last = time.time()
            answer = answer_tokens(words, end, self.lengths.randint(*ANSWER_TOKENS))
            return TokenOutput(token_ids=answer, log_probs=[-1.0] * len(answer), stop_reason="completed",
                               extra_fields={"global_steps": 1, "min_global_steps": 1, "max_global_steps": 1})

        async def last_request(self) -> float:
            return self.last

    return ray.remote(num_cpus=1)(EchoServer).remote()


class VerlDriver:
    """One Ray session's verl rollout path and trainer stages; `close` releases what it started."""

    def __init__(self, world: int, prompts: int, n: int, micro_per_rank: int, agent_workers: int = 1) -> None:
        import transfer_queue as tq
        from transformers import AutoTokenizer
        from verl.experimental.reward_loop import RewardLoopManager
        from verl.trainer.ppo.utils import create_rl_dataset
        from verl.trainer.ppo.v1 import AgentLoopManagerTQ
        from verl.workers.rollout.llm_server import LLMServerClient
        from verl.workers.rollout.router import get_router_handle

        from executor.cpu.assets import make_math_dataset, make_tiny_model
        from executor.cpu.launch import cpu_run_config

        self.world, self.n, self.micro_per_rank = world, n, micro_per_rank
        self._dir = tempfile.TemporaryDirectory(prefix="overhead-verl-")
        root = Path(self._dir.name)
        model = make_tiny_model(root / "model")
        train, test = make_math_dataset(root / "data", prompts, 4)
        overrides, _ = cpu_run_config(root / "run", model_dir=model, train_files=train, val_files=test, steps=1,
                                      world=world, batch_prompts=micro_per_rank * world // n, n=n, prompt_len=64,
                                      response_len=32, rollout_tp=world)
        self.config = _compose([*overrides, f"actor_rollout_ref.rollout.agent.num_workers={agent_workers}"])
        # the overhead job loads the CPU plugin in this process, so this init has its storage unit freeze its heap
        # as the run's driver does (executor/cpu/startup_heap.py freeze_storage_after_init)
        tq.init(self.config.transfer_queue)
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self._server = _echo_server(self.tokenizer.encode(ANSWER), self.tokenizer.eos_token_id)
        client = LLMServerClient(config=self.config,
                                 load_balancer_handle=get_router_handle(servers={"echo": self._server}))
        self._rewards = RewardLoopManager(config=self.config, rm_resource_pool=None)
        self._agents = AgentLoopManagerTQ.create(config=self.config, llm_client=client, teacher_client=None,
                                                 reward_loop_worker_handles=self._rewards.reward_loop_worker_handles)
        self._dataset = create_rl_dataset(self.config.data.train_files, self.config.data, self.tokenizer, None)
        self._actor: Any = None
        self.samples: dict[str, dict] = {}  # the last finished batch: sample key -> its TransferQueue tag
        self.warm: set[str] = set()  # the overhead job's ops timed once already on this driver
        self.handed_s = 0.0  # the last rollout's time from its submission to its last request's hand-over

    # ---- the rollout path ----------------------------------------------------------------------------
    def clear(self) -> None:
        """Drop every key from TransferQueue's train partition."""
        import transfer_queue as tq

        keys = list((tq.kv_list() or {}).get("train") or {})
        if keys:
            tq.kv_clear(keys=keys, partition_id="train")
        self.samples = {}

    def rollout(self, prompts: int) -> None:
        """Submit `prompts` prompts the way verl's sync trainer does and return when every group has finished;
        `handed_s` then holds when the last of its requests reached the engine, from the submission."""
        import numpy as np
        import ray
        import transfer_queue as tq
        from verl.utils import tensordict_utils as tu
        from verl.utils.dataset.rl_dataset import collate_fn

        rows = collate_fn([self._dataset[i % len(self._dataset)] for i in range(prompts)])
        rows["uid"] = np.array([str(uuid.uuid4()) for _ in range(prompts)], dtype=object)
        batch = tu.get_tensordict(rows)
        tu.assign_non_tensor_data(batch, "global_steps", 1)
        uids = list(batch["uid"])
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}] * prompts)
        submitted = time.time()
        self._agents.generate_sequences(batch)
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while True:
            items = (tq.kv_list() or {}).get("train") or {}
            status = [items.get(u, {}).get("status") for u in uids]
            if all(s in ("finished", "failure") for s in status):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"verl's agent loop did not finish {prompts} prompts in {BATCH_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)
        if "failure" in status:
            raise RuntimeError(f"verl's agent loop failed {status.count('failure')} of {prompts} prompt groups")
        tq.kv_clear(keys=uids, partition_id="train")
        self.samples = {k: t for k, t in items.items() if not t.get("is_prompt")}
        self.handed_s = ray.get(self._server.last_request.remote()) - submitted

    def mean_lengths(self) -> tuple[float, float]:
        """(prompt, response) tokens per sample of the last batch, from its TransferQueue tags."""
        tags = list(self.samples.values())
        return (sum(t["prompt_len"] for t in tags) / len(tags), sum(t["response_len"] for t in tags) / len(tags))

    # ---- the trainer's stages on the last batch -----------------------------------------------------
    def _trainer(self, responses: int) -> Any:
        """What verl's PPOTrainer stage methods read from `self`: the config (the mini-batch set to the whole
        batch, one optimizer step as in the CPU loop) and the actor worker group."""
        from types import SimpleNamespace

        from omegaconf import open_dict

        with open_dict(self.config):
            self.config.actor_rollout_ref.actor.ppo_mini_batch_size = responses // self.n
        return SimpleNamespace(config=self.config, actor_rollout_wg=self._actor, distillation_config=None)

    def _meta(self) -> Any:
        from transfer_queue import KVBatchMeta

        if not self.samples:
            raise RuntimeError("no finished batch in TransferQueue: a rollout point must run first")
        return KVBatchMeta(partition_id="train", keys=list(self.samples), tags=list(self.samples.values()))

    def stage(self, name: str) -> None:
        """One of verl's trainer stages on the last batch: `old_log_prob` (bypass mode: the rollout's log-probs
        copied through TransferQueue), `advantage` (GRPO) or `update` (update_actor on the FSDP2 workers)."""
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer

        method = {"old_log_prob": PPOTrainer._compute_old_log_prob, "advantage": PPOTrainer._compute_advantage,
                  "update": PPOTrainer._update_actor}[name]
        if name == "update" and self._actor is None:
            self._actor = self._actor_group()
        method(self._trainer(len(self.samples)), self._meta(), {})

    def _actor_group(self) -> Any:
        """verl's ActorRolloutRefWorker in the actor role (FSDP2 engine) on `world` trainer ranks."""
        import ray
        from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
        from verl.workers.engine_workers import ActorRolloutRefWorker

        pool = RayResourcePool([self.world], use_gpu=True, max_colocate_count=1)
        cls = RayClassWithInitArgs(cls=ray.remote(ActorRolloutRefWorker), config=self.config.actor_rollout_ref,
                                   role="actor")
        group = RayWorkerGroup(pool, cls, device_name=self.config.trainer.device)
        group.init_model()
        return group

    def close(self) -> None:
        import transfer_queue as tq

        self._actor = self._agents = self._rewards = None
        tq.close()
        self._dir.cleanup()
