"""Plan -> Hydra overrides for verl's `ppo_trainer.yaml` (verl 0.9.x)."""
