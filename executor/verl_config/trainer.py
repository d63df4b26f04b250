"""Trainer, data, model and logging overrides: nodes and devices, the metrics file, the run's paths."""

from __future__ import annotations

from executor.options import LaunchOptions, RunPaths
from executor.verl_config.overrides import OverrideSet

PROJECT = "ascend-rl-twin"
METRICS_ENV = "VERL_FILE_LOGGER_PATH"  # verl/utils/tracking.py FileLogger writes {"step", "data"} lines there


def trainer_overrides(o: OverrideSet, *, name: str, model: str, devices: int, per_node: int, device: str,
                      options: LaunchOptions, critic: bool = False) -> dict[str, str]:
    """Set trainer/data/model keys (with `critic`, PPO's critic starts from the actor's checkpoint too); return the
    environment the metrics file needs."""
    paths = RunPaths(workdir=options.workdir)
    o.set("trainer.nnodes", max(1, devices // per_node))
    o.set("trainer.n_gpus_per_node", min(devices, per_node))
    o.set("trainer.device", device)
    o.set("trainer.logger", ["console", "file"])
    o.set("trainer.project_name", PROJECT)
    o.set("trainer.experiment_name", name)
    o.set("trainer.val_before_train", False)
    o.set("trainer.default_local_dir", str(paths.checkpoints))
    if options.steps is not None:
        o.set("trainer.total_training_steps", options.steps)
    for role in ("actor_rollout_ref", "critic") if critic else ("actor_rollout_ref",):
        o.set(f"{role}.model.path", options.model_path or model)
    if options.data_dir is not None:
        o.set("data.train_files", str(options.train_files))
        o.set("data.val_files", str(options.val_files))
    return {METRICS_ENV: str(paths.metrics)}


def runtime_env_overrides(o: OverrideSet, env: dict[str, str]) -> None:
    """Hand the environment to every Ray worker, also on an existing cluster (ray.init runtime_env)."""
    for key, value in sorted(env.items()):
        o.set(f"ray_kwargs.ray_init.runtime_env.env_vars.{key}", value, add=True)
