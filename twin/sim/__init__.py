"""Discrete-event simulation (simpy) of a colocated GRPO step on the cluster topology."""
