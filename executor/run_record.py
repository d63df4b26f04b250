"""The run record: what `executor run` started, with what, and where its log and metrics are.

Written atomically next to the run's log; `calibration ingest --plan` and the log ingestion read it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from twin.fileio import read_bytes, read_mapping, validated, write_atomic

RUN_RECORD_SCHEMA = 1


class OptimizationStatus(BaseModel):
    """How one optimization of DESIGN section 6 was applied in this run."""

    model_config = ConfigDict(extra="forbid")

    id: str
    mechanism: Literal["native", "patch", "config", "env", "unavailable", "off"]
    status: str  # e.g. "applied", "targets found", "not meaningful on cpu"
    detail: str = ""


class RunRecord(BaseModel):
    """One execution of a plan."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_version: int = Field(default=RUN_RECORD_SCHEMA, alias="schema")
    plan_path: str
    plan_sha256: str
    scenario: str
    cluster_kind: str
    cards: int = Field(ge=1)
    devices: int = Field(ge=1)
    command: list[str]
    env: dict[str, str]
    versions: dict[str, str]
    host: dict[str, str]
    workdir: str
    log_path: str
    metrics_path: str
    optimizations: list[OptimizationStatus] = []
    engines: dict[str, str] = {}  # "train" / "rollout" -> the engine (and version) that ran it
    patch_reports_dir: str | None = None  # per-process JSON reports of the worker hook (pid, patches applied)
    started_at: datetime
    ended_at: datetime | None = None
    exit_status: int | None = None

    @model_validator(mode="after")
    def _schema(self) -> RunRecord:
        if self.schema_version != RUN_RECORD_SCHEMA:
            raise ValueError(f"run record schema {self.schema_version} is not supported (this executor writes "
                             f"{RUN_RECORD_SCHEMA})")
        return self


def sha256_file(path: Path) -> str:
    return hashlib.sha256(read_bytes(path, f"plan {path}", 1 << 30)).hexdigest()


def save_record(record: RunRecord, path: Path) -> None:
    write_atomic(path, json.dumps(record.model_dump(mode="json", by_alias=True), indent=2) + "\n")


def load_record(path: Path) -> RunRecord:
    label = f"run record {path}"
    return validated(RunRecord, read_mapping(path, label, "json"), label)
