"""Generated file contents and kinds (encodings, nesting, binary, FIFOs, devices, directories) given to every
reading command, and generated output targets (directories, devices, system paths, an input) to every writer."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "cpu-tiny-grpo.yaml"
TEXT = SCENARIO.read_text()


def _deep(depth: int, json_like: bool) -> str:
    if json_like:
        return '{"a": ' + "[" * depth + "]" * depth + "}"
    return "a: " + "[" * depth + "]" * depth + "\n"


contents = st.one_of(
    st.binary(max_size=64),
    st.sampled_from(["latin-1", "utf-16", "utf-32"]).map(lambda enc: ("name: caf\u00e9\n" + TEXT).encode(enc)),
    st.tuples(st.integers(1, 100_000), st.booleans()).map(lambda a: _deep(*a).encode()),
    st.text(max_size=40).map(str.encode),
    st.just(b"a: &x [1, 2]\nb: [*x, *x]\n"),
    st.just(TEXT.encode()),
)
READERS = [
    lambda f, w: ("twin", "simulate", f, "--analytical"),
    lambda f, w: ("twin", "plan", "--scenario", f, "--keep-layout", "-o", w / "out-plan.json"),
    lambda f, w: ("twin", "simulate", SCENARIO, "--analytical", "--profile", f),
    lambda f, w: ("twin", "layouts", "--model", f, "--cards", "2", "--cluster", "cpu"),
    lambda f, w: ("executor", "run", f, "--dry-run"),
    lambda f, w: ("calibration", "report", "--profile", f, "--cases", SCENARIO),
    lambda f, w: ("calibration", "report", "--profile", REPO / "twin" / "profiles" / "cpu.yaml", "--cases", f),
]


@settings(max_examples=60)
@given(contents, st.sampled_from(range(len(READERS))), st.sampled_from([".yaml", ".json"]))
def test_generated_file_content(cli, work, content, reader, suffix) -> None:
    f = work / f"in-{reader}{suffix}"
    f.write_bytes(content)
    cli(*READERS[reader](f, work), inputs=[f])


@settings(max_examples=14)
@given(st.sampled_from(["fifo", "device", "directory", "missing"]), st.sampled_from(range(len(READERS))))
def test_special_files_are_refused_without_blocking(cli, work, kind, reader) -> None:
    f = {"device": Path("/dev/zero"), "directory": work, "missing": work / "none.yaml"}.get(kind, work / "fifo.yaml")
    if kind == "fifo" and not f.exists():
        os.mkfifo(f)
    outcome = cli(*READERS[reader](f, work))
    assert outcome.code != 0


TARGETS = ["directory", "device", "proc", "input", "missing-parent"]


@settings(max_examples=20)
@given(st.sampled_from(TARGETS), st.sampled_from(["plan", "trace", "plot", "report-plot"]))
def test_output_targets_are_checked_first(cli, work, target, option) -> None:
    src = work / "target-src.yaml"
    src.write_text(TEXT)
    path = {"directory": work, "device": Path("/dev/null"), "proc": Path("/proc/self/x"), "input": src,
            "missing-parent": work / "no" / "such" / "out"}[target]
    if option == "plot" and target == "directory":
        path = src  # a plot directory given as an existing file
    argv = {"plan": ("twin", "plan", "--scenario", src, "--keep-layout", "-o", path),
            "trace": ("twin", "simulate", src, "--trace", path),
            "plot": ("twin", "simulate", src, "--plot", path),
            "report-plot": ("calibration", "report", "--profile", REPO / "twin" / "profiles" / "cpu.yaml",
                            "--cases", src, "--plot", path)}[option]
    outcome = cli(*argv, inputs=[src])
    assert outcome.code != 0
    assert Path("/dev/null").is_char_device()
    assert not list(work.glob(".*.*")), "a temporary file was left behind"
