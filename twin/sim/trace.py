"""What the simulation saw: spans on lanes (a Chrome/Perfetto trace) and the memory timeline."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from twin.fileio import write_atomic
from twin.results import MemoryBreakdown


@dataclass
class Span:
    lane: str  # a device group, e.g. "pipeline stage 0 (ranks 0-31)"
    track: str  # what runs on it: compute, comm, phase, ...
    name: str
    start_s: float
    dur_s: float
    args: dict = field(default_factory=dict)


@dataclass
class Trace:
    spans: list[Span] = field(default_factory=list)
    memory: list[tuple[float, str, MemoryBreakdown]] = field(default_factory=list)  # (time, phase, worst device)

    def span(self, lane: str, track: str, name: str, start_s: float, dur_s: float, **args: object) -> None:
        if dur_s > 0:
            self.spans.append(Span(lane, track, name, start_s, dur_s, dict(args)))

    def mark_memory(self, t: float, phase: str, breakdown: MemoryBreakdown) -> None:
        self.memory.append((t, phase, breakdown))

    def chrome(self) -> dict:
        """The trace as Chrome's JSON format (load it in chrome://tracing or ui.perfetto.dev)."""
        lanes = {lane: i for i, lane in enumerate(dict.fromkeys(s.lane for s in self.spans))}
        tracks: dict[tuple[str, str], int] = {}
        events: list[dict] = []
        for lane, pid in lanes.items():
            events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": lane}})
        for s in self.spans:
            tid = tracks.setdefault((s.lane, s.track), len(tracks))
            events.append({"name": s.name, "ph": "X", "pid": lanes[s.lane], "tid": tid, "ts": s.start_s * 1e6,
                           "dur": s.dur_s * 1e6, "cat": s.track, "args": s.args})
        for (lane, track), tid in tracks.items():
            events.append({"name": "thread_name", "ph": "M", "pid": lanes[lane], "tid": tid, "args": {"name": track}})
        return {"traceEvents": events, "displayTimeUnit": "ms"}

    def write(self, path: Path | str) -> None:
        write_atomic(path, json.dumps(self.chrome()))
