"""The `cpu` target: real verl GRPO steps on a CPU-only host, loaded into verl from outside.

`executor.cpu.verl_plugin` is named in VERL_USE_EXTERNAL_MODULES; it registers a CPU platform, the
FSDP training engines for device cpu and a transformers rollout backend. `executor.cpu.launch` builds
the Hydra overrides and environment of such a run; `executor.cpu.assets` makes its tiny model and data.
"""
