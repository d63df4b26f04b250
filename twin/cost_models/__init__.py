"""Cost models: compute, memory, communication, rollout, reshard, offload."""
