"""Ascend optimizations applied inside verl workers, one module each."""
