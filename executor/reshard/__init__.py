"""The weight reshard from the training layout to the rollout layout, run for real over torch.distributed.

`schedule` turns the twin's exact transfer list into all-to-all-v rounds (no torch), `blocks` moves
block regions in and out of flat byte buffers, `engine` runs the rounds on one rank, `tiny_model` makes a
CPU-sized model of a plan's architecture, `spawn` runs the ranks as local processes and `command` is
`executor check-reshard`. The public entry point is `executor.npu_opt.directed_reshard_transfer`.
"""
