"""The driver's work on the padded batch around verl's trainer calls, on this machine's CPU: the source of the twin's
driver terms for verl >= 0.6 (twin/cost_models/scheduling.py: `driver_put_s_per_gb`, `driver_get_s_per_gb`,
`driver_debug_ns_per_element`).

Run: python benchmarks/verl_driver_batch_cpu.py [--sequences 512 2048] [--prompt 2048] [--response 8192] [--dp 8]
     [--repeats 3]

verl's driver holds every sequence padded to the prompt and response limits. From verl 0.6 a worker-group call
splits the batch into its data-parallel chunks and puts each into Ray's object store once
(single_controller/base/decorator.py dispatch_nd_compute, verl.utils.ray_utils.parallel_put); the workers' outputs
come back through ray.get and DataProto.concat (collect_nd_compute_dataproto); and after the old-policy log-prob
pass the driver averages the entropies (core_algos.agg_loss) and, where the rollout returned its own log-probs,
compares them with the trainer's (utils/debug/metrics.py calculate_debug_metrics), all on the padded
(sequences x response limit) tensors. This script builds the batch the trainer holds at the old-policy log-prob
call (input_ids, attention_mask, position_ids over prompt + response; prompts; responses, response_mask and the
rollout's log-probs over the response), times, median of `--repeats`:
- verl's parallel_put of its `--dp` chunks on one thread (seconds per GB; verl's threads bring 28.85 -> 19.86 s by
  its #3495, which the twin applies);
- ray.get of those chunks and DataProto.concat (seconds per GB);
- agg_loss, and calculate_debug_metrics, on (sequences x response) tensors (nanoseconds per element each).
"""

from __future__ import annotations

import argparse
import statistics
import time


def _batch(sequences: int, prompt: int, response: int):
    """The padded batch verl's driver holds at the old-policy log-prob call, with lognormal response lengths."""
    import numpy as np
    import torch
    from verl import DataProto

    lengths = torch.clamp(torch.distributions.LogNormal(7.0, 0.8).sample((sequences,)), min=1, max=response).long()
    mask = (torch.arange(response).expand(sequences, response) < lengths[:, None]).long()
    full = prompt + response
    tensors = {
        "input_ids": torch.randint(0, 150_000, (sequences, full)),
        "attention_mask": torch.ones(sequences, full, dtype=torch.int64),
        "position_ids": torch.arange(full).expand(sequences, full).contiguous(),
        "prompts": torch.randint(0, 150_000, (sequences, prompt)),
        "responses": torch.randint(0, 150_000, (sequences, response)),
        "response_mask": mask,
        "rollout_log_probs": -torch.rand(sequences, response),
    }
    uid = np.array([str(i // 16) for i in range(sequences)], dtype=object)
    data = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uid})
    return data, sum(t.numel() * t.element_size() for t in tensors.values()) / 1e9


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(sequences: int, prompt: int, response: int, dp: int, repeats: int) -> dict[str, float]:
    import ray
    import torch
    from verl import DataProto
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.ray_utils import parallel_put

    data, gb = _batch(sequences, prompt, response)
    chunks = data.chunk(dp)
    refs = parallel_put(chunks, max_workers=1)
    put_s = _median_s(lambda: parallel_put(chunks, max_workers=1), repeats)
    get_s = _median_s(lambda: DataProto.concat(ray.get(refs)), repeats)
    out = DataProto.from_dict(tensors={"old_log_probs": -torch.rand(sequences, response),
                                       "entropys": torch.rand(sequences, response)})
    both = data.union(out)

    elements = sequences * response
    entropy_s = _median_s(lambda: agg_loss(loss_mat=out.batch["entropys"], loss_mask=data.batch["response_mask"],
                                           loss_agg_mode="token-mean").item(), repeats)
    debug_s = _median_s(lambda: calculate_debug_metrics(both), repeats)
    return {"gb": gb, "put_s_per_gb": put_s / gb, "get_s_per_gb": get_s / gb,
            "entropy_ns_per_element": entropy_s / elements * 1e9, "debug_ns_per_element": debug_s / elements * 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--response", type=int, default=8192)
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import ray
    import torch

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", object_store_memory=8 * 2**30)
    print(f"torch threads {torch.get_num_threads()}; prompt {args.prompt} + response {args.response} tokens, "
          f"{args.dp} chunks, median of {args.repeats}")
    print(f"{'sequences':>9} {'GB':>6} {'put s/GB':>9} {'get s/GB':>9} {'entropy ns/elt':>14} {'debug ns/elt':>12}")
    for sequences in args.sequences:
        m = measure(sequences, args.prompt, args.response, args.dp, args.repeats)
        print(f"{sequences:>9} {m['gb']:>6.2f} {m['put_s_per_gb']:>9.3f} {m['get_s_per_gb']:>9.3f} "
              f"{m['entropy_ns_per_element']:>14.1f} {m['debug_ns_per_element']:>12.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
