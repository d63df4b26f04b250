"""The measurement jobs, one module per job family, loaded by name on demand."""

from __future__ import annotations

import importlib

from calibration.errors import CalibrationError
from calibration.jobs.base import Job

JOB_MODULES = {
    "gemm": "calibration.jobs.gemm",
    "attention": "calibration.jobs.attention",
    "collectives": "calibration.jobs.collectives",
    "copy": "calibration.jobs.copy",
    "decode": "calibration.jobs.decode",
    "train": "calibration.jobs.train",
    "overhead": "calibration.jobs.overhead",
    "page_touch": "calibration.jobs.page_touch",
}


def load_job(name: str) -> Job:
    """The job called `name`; unknown names are a user error naming the known ones."""
    if name not in JOB_MODULES:
        raise CalibrationError(f"unknown job {name!r}; known jobs: {', '.join(JOB_MODULES)}")
    return importlib.import_module(JOB_MODULES[name]).JOB
