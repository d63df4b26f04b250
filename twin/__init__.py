"""Digital twin of GRPO, DAPO and PPO post-training on Ascend A2/A3 clusters."""

__version__ = "0.1.0"
