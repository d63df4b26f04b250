"""A rollout whose engine computes on the same host cores as verl's agent-loop path (the CPU target).

verl's agent loop hands the requests to the engine one by one, as fast as its own path goes (the overhead job
times that path with an engine that answers at once: `agent_s` for the round, keeping `busy_cores` of the host
busy). On the CPU target the engine's worker processes compute on the same cores: while a request is in flight
the engine steps, and each of its `workers` is a runnable process. The kernel's scheduler gives every runnable
process an equal share of the cores (CFS / EEVDF fair share), so once the runnable demand exceeds the cores the
agent-loop path runs slower by

    slowdown = (busy_cores + workers x duty + front_end_cores) / cores    (at least 1)

where `duty` is the fraction of the time the engine has a request in flight. Requests arrive at rate
lambda = requests / T over the path's time T and each stays R in the engine (its prefill and its decode steps,
themselves slowed by the same factor), so duty = 1 - exp(-lambda R), the busy probability of an M/G/inf queue;
the front end's time per request (vLLM's input and output processing) is CPU work of its own,
front_end_cores = front_end_s / T. T = agent_s x slowdown(T) has one solution: the right side falls as T grows.
Here `agent_s` is the path's time until it hands its last request over (the overhead job measures what share of
the path's time that is: verl's event loop hands every request over before it finishes the responses' rewards and
writes); the round ends when that request, handed over at T, has left the engine and the path has done the rest
(RolloutCost.agent_loop_round adds the longer of the two).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

BISECTIONS = 40  # halvings of the bracket [agent_s, agent_s x the full-duty slowdown]: to 1e-12 of it
FIXED_POINT_ROUNDS = 12  # iterations of the slowdown at one round length: converged to 1e-6 on the CPU loop


@dataclass(frozen=True)
class SharedHost:
    seconds: float  # the agent-loop path's time for the round with the engine beside it on the host
    slowdown: float  # that time over the path's time alone
    duty: float  # fraction of the time the engine has a request in flight
    in_flight: float  # mean requests in the engine (Little's law)


def shared_host_rollout(agent_s: float, requests: int, busy_cores: float, cores: float, workers: int,
                        front_end_s: float, residence_s: Callable[[float], float]) -> SharedHost:
    """The agent-loop path's time with the engine stepping beside it (module docstring). `residence_s(batch)`:
    how long one request stays in the engine running alone at that mean batch (prefill and decode steps)."""
    if agent_s <= 0.0 or requests <= 0:
        return SharedHost(agent_s, 1.0, 0.0, 0.0)

    def state(seconds: float) -> SharedHost:
        """The slowdown that the round's length `seconds` implies: the smallest fixed point of slowdown =
        demand(duty(slowdown)) / cores, reached from 1 upwards (the demand grows with the slowdown, boundedly)."""
        rate = requests / seconds
        slow, in_flight, duty = 1.0, 0.0, 0.0
        for _ in range(FIXED_POINT_ROUNDS):
            resident = residence_s(max(1.0, in_flight)) * slow
            in_flight = rate * resident
            duty = 1.0 - math.exp(-in_flight)
            slow = max(1.0, (busy_cores + workers * duty + front_end_s / seconds) / cores)
        return SharedHost(agent_s * slow, slow, duty, in_flight)

    lo = agent_s
    hi = max(lo, agent_s * max(1.0, (busy_cores + workers) / cores + front_end_s / (agent_s * cores)))
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        if state(mid).seconds > mid:
            lo = mid
        else:
            hi = mid
    return state(hi)
