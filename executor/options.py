"""What the user passes to `executor run` besides the plan, and where a run's files go."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class LaunchOptions(BaseModel):
    """Command-line options of `executor run` (validated at the CLI boundary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workdir: Path
    model_path: str | None = None
    data_dir: Path | None = None
    steps: int | None = Field(default=None, ge=1)

    @property
    def train_files(self) -> Path | None:
        return self.data_dir / "train.parquet" if self.data_dir else None

    @property
    def val_files(self) -> Path | None:
        return self.data_dir / "test.parquet" if self.data_dir else None


class RunPaths(BaseModel):
    """Files of one run, all under the work directory."""

    model_config = ConfigDict(frozen=True)

    workdir: Path

    @property
    def log(self) -> Path:
        return self.workdir / "run.log"

    @property
    def metrics(self) -> Path:
        return self.workdir / "metrics.jsonl"

    @property
    def record(self) -> Path:
        return self.workdir / "run_record.json"

    @property
    def patch_reports(self) -> Path:
        return self.workdir / "worker_patches"

    @property
    def sync_timings(self) -> Path:
        return self.workdir / "sync_timings"

    @property
    def rollout_timings(self) -> Path:
        return self.workdir / "rollout_timings"

    @property
    def checkpoints(self) -> Path:
        return self.workdir / "checkpoints"

    def outputs(self) -> dict[str, Path]:
        """The files and directories the run writes here, by what each is."""
        return {"log": self.log, "metrics": self.metrics, "record": self.record,
                "worker patch reports": self.patch_reports, "weight sync timings": self.sync_timings,
                "rollout timings": self.rollout_timings, "checkpoints": self.checkpoints}
