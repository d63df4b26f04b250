"""Calibration: hardware measurement jobs and training-log ingestion, into measurements.jsonl.

`calibration run JOB...` (runner, jobs/) measures micro-benchmarks; `calibration ingest LOG...` (ingest,
verl_logs) turns verl's per-step metrics into records; both write the records of `measurements`.
"""
