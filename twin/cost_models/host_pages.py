"""First touches of host memory the hypervisor has taken back: what a CPU target's trainer passes pay after the
rollout.

A guest kernel with free page reporting (virtio-balloon; Linux mm/page_reporting.c reports free blocks to the host
PAGE_REPORTING_DELAY = 2 s after they are freed, and the host discards them) makes the next touch of such a page a
fault on the host as well as in the guest. On the CI host (a Firecracker guest: "Free page reporting enabled", order
9: 2 MiB blocks) the `page_touch` calibration job's buffer takes 6-25 us a 4 KiB page after an idle gap against 0.37
us at once, when the guest still holds the pages (2026-12-05, locally and in CI: 6.3-7.1 us until 04:00, 9.7-24.8 us
after, the host's price moving within the hour). In the CPU loop the trainer ranks wait out the rollout while the
engine's processes run; their first pass afterwards faulted its memory at 7.4-7.9 us a fault (85-132 thousand faults
per update on two ranks, perf: clear_page 24 % of the ranks' update samples), where verl's update alone on the host
(benchmarks/verl_update_cpu.py, even after 14 s idle) faults at under 3 us. The guest's allocator serves a 4 KiB
fault from its smallest free block, and only blocks of 2 MiB or more are reported (page_reporting_order reads 9 in
sysfs): 4 KiB faults land on returned memory once the small free blocks are used up, which the run's processes do
and the lone update does not (a fresh mapping touched 128 MiB at a time: 1.6-1.9 us a page through the host's 6.6
GiB of small blocks, 13-33 us after them, the job's buffer 23 us the same hour, 2026-12-05). How many of the pass's
pages land there is the guest's free-memory state: in that hour the run's update faulted at 7.9-10 us, a third of
its pages on returned memory, where in the morning nearly all were. The model charges every page (the run's case at
its worst: an upper bound).

The pages are the pass's activation bytes (`TrainMemory`, as allocated, of the busiest stage; ranks fault their
own in parallel): the first trainer pass after the rollout touches all of its own, each later pass only what it
needs beyond the largest before it (the pages it reuses are the guest's own again). A profile without
`host_returned_page_us` (every accelerator kind: their activations live in device memory) pays nothing. The update
of a loop's later mini-batches reuses the first's pages; only the first is charged.
"""

from __future__ import annotations

from twin.cost_models.memory import TrainMemory
from twin.profile import Profile
from twin.scenario import Scenario

PAGE_BYTES = 4096  # x86-64 base page: the unit the kernel faults and the host takes back
RETURNED_PAGE_TERM = "host_returned_page_us"


def returned_page_seconds(sc: Scenario, pf: Profile, tm: TrainMemory) -> dict[str, float]:
    """Seconds each trainer pass after the rollout (old_log_prob unless bypassed, ref with a KL loss, PPO's values
    and update_critic, update) spends first-touching pages the host took back; {} where the profile does not carry
    the term."""
    if RETURNED_PAGE_TERM not in pf.params:
        return {}
    stages = range(tm.n_stages)
    log_prob = max(tm.log_prob_activation_bytes(s, fragmented=False) for s in stages)
    passes = {"old_log_prob": log_prob if not sc.has("skip_old_log_prob") else 0.0,
              "ref": log_prob if sc.workload.use_kl_loss else 0.0}
    critic = tm.value_model
    if critic is not None:  # PPO: the critic's values pass, then its update, before the actor's
        passes["values"] = max(critic.log_prob_activation_bytes(s, fragmented=False) for s in stages)
        passes["update_critic"] = max(critic.update_activation_bytes(s, fragmented=False) for s in stages)
    passes["update"] = max(tm.update_activation_bytes(s, fragmented=False) for s in stages)
    seconds, touched = {}, 0.0
    for name, nbytes in passes.items():
        fresh = max(0.0, nbytes - touched)
        touched = max(touched, nbytes)
        seconds[name] = fresh / PAGE_BYTES * pf[RETURNED_PAGE_TERM] * 1e-6
    return seconds
