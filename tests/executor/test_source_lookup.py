"""Patch targets and config field types found in installed source without importing it (executor command-file),
against the import checks `executor run` keeps."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executor import source_lookup
from executor.npu_opt.host import HostEnv, in_source
from executor.npu_opt.patch_target import PatchTarget
from executor.source_lookup import Undecided, lookup, parameters
from executor.typecheck import imported_hints, source_hints, type_problems

REPO = Path(__file__).resolve().parents[2]
FILES = {
    "__init__.py": "from .engine import Worker as Exported\nfrom .engine import *\nimport fakeverl.sub as sub_alias\n",
    "engine.py": """
        import collections.abc
        from dataclasses import dataclass, field
        from typing import Optional, Union

        __all__ = ["Worker", "Config"]
        LIMIT = 3

        class Base:
            def inherited(self, x):
                return x

        class Worker(Base):
            rate: float = 0.5

            def run(self, batch, steps=1, *, mode="auto"):
                return batch

            @staticmethod
            def helper():
                return None

        Alias = Worker

        @dataclass
        class BaseConfig(collections.abc.Mapping):
            flag: bool = False

        @dataclass
        class Config(BaseConfig):
            size: int = 1
            ratio: Optional[float] = None
            name: "str | None" = None
            either: Union[int, str] = 0
            sizes: list[int] = field(default_factory=list)

        class Hidden:
            pass
        """,
    "sub.py": "VALUE = 1\n",
    "lazy.py": "def __getattr__(name):\n    return name\n",
}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable package `fakeverl` written to a fresh directory on sys.path."""
    package = tmp_path / "fakeverl"
    package.mkdir()
    for name, text in FILES.items():
        (package / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    source_lookup._located.cache_clear()  # a previous test's fakeverl lies in another directory
    source_lookup._FOUND.clear()
    for name in [m for m in sys.modules if m.startswith("fakeverl")]:
        monkeypatch.delitem(sys.modules, name)
    return "fakeverl"


@pytest.mark.parametrize("module, attribute", [
    ("fakeverl.engine", "Worker.run"), ("fakeverl.engine", "Worker.inherited"), ("fakeverl.engine", "Worker.rate"),
    ("fakeverl.engine", "Worker.helper"), ("fakeverl.engine", "Alias.run"), ("fakeverl.engine", "LIMIT"),
    ("fakeverl", "Exported.run"), ("fakeverl", "Config"), ("fakeverl", "sub_alias.VALUE"),
    ("fakeverl.engine", "Config.keys"),  # from collections.abc.Mapping, a standard-library base
])
def test_present_names_are_found_without_importing(fake, module, attribute):
    assert lookup(module, attribute) is not None
    assert not any(m.startswith("fakeverl") for m in sys.modules)


@pytest.mark.parametrize("module, attribute", [
    ("fakeverl.engine", "Worker.missing"), ("fakeverl.engine", "Nope.run"), ("fakeverl.engine", "Alias.missing"),
    ("fakeverl", "Hidden"),  # not in engine's __all__: the star import does not bring it
])
def test_absent_names_are_reported(fake, module, attribute):
    assert lookup(module, attribute) is None


def test_missing_module_and_undecidable_module(fake):
    with pytest.raises(ModuleNotFoundError):
        lookup("fakeverl.absent", "X")
    with pytest.raises(Undecided):  # a module __getattr__ can return anything
        lookup("fakeverl.lazy", "whatever")


def test_parameters_of_a_method(fake):
    assert parameters(lookup("fakeverl.engine", "Worker.run")) == ["self", "batch", "steps", "mode"]
    with pytest.raises(Undecided):
        parameters(lookup("fakeverl.engine", "LIMIT"))


CASES = [  # (attribute, params, found, fragment of the detail when not found)
    ("Worker.run", ("batch", "mode"), True, ""),
    ("Worker.missing", (), False, "'missing' is missing from the installed verl"),
    ("Nope.run", (), False, "'Nope' is missing from the installed verl"),
    ("Worker.run", ("batch", "tokens"), False, "has no parameter tokens (it has self, batch, steps, mode)"),
]


@pytest.mark.parametrize("from_source", [True, False], ids=["source", "import"])
@pytest.mark.parametrize("attribute, params, found, fragment", CASES)
def test_source_and_import_checks_report_the_same(fake, from_source, attribute, params, found, fragment):
    target = PatchTarget(module="fakeverl.engine", attribute=attribute, dist="verl", params=params)
    check = HostEnv(from_source=from_source).check(target)
    assert check.found is found and fragment in check.detail
    assert any(m.startswith("fakeverl") for m in sys.modules) is not from_source


def test_missing_module_reported_from_source(fake):
    check = HostEnv(from_source=True).check(PatchTarget(module="fakeverl.gone", attribute="X", dist="verl"))
    assert not check.found and "no module fakeverl.gone in the installed verl" in check.detail


def test_undecidable_source_falls_back_to_the_import(fake):
    check = HostEnv(from_source=True).check(PatchTarget(module="fakeverl.lazy", attribute="anything", dist="verl"))
    assert check.found and "fakeverl.lazy" in sys.modules


def test_field_types_read_from_source(fake):
    hints = source_hints("fakeverl.engine.Config")
    assert hints == {"flag": (bool,), "size": (int,), "ratio": (float, type(None)), "name": (str, type(None)),
                     "either": (int, str)}
    assert hints == imported_hints("fakeverl.engine.Config")
    assert source_hints("fakeverl.engine.Worker") == {}  # not a dataclass
    section = {"_target_": "fakeverl.engine.Config", "size": "big", "ratio": 2, "flag": 1, "sizes": "x"}
    assert type_problems(section, "cfg", source_hints) == ["cfg.size='big': expected int",
                                                           "cfg.flag=1: expected bool"]


def test_verl_config_types_from_source_match_the_imported_dataclasses():
    """Every dataclass verl's composed config names: its primitive field types read from source equal those of the
    imported class (the check command-file runs agrees with the one executor run runs)."""
    from omegaconf import OmegaConf

    from executor.validate import compose

    targets: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            targets.update([node["_target_"]] if "_target_" in node else [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(OmegaConf.to_container(compose(["model_engine=megatron"]), resolve=False))
    assert len(targets) > 20
    from_source = {t: source_hints(t) for t in sorted(targets)}
    assert {t: imported_hints(t) for t in sorted(targets)} == from_source
    assert sum(map(len, from_source.values())) > 300


def test_verl_patch_targets_from_source_match_the_import():
    from executor.npu_opt.directed_reshard import REGISTRY, UPDATE_WEIGHTS

    for target in (REGISTRY, UPDATE_WEIGHTS):
        assert HostEnv(from_source=True).check(target) == HostEnv().check(target)
    lacking = UPDATE_WEIGHTS.model_copy(update={"params": ("global_steps", "tokens")})
    source, imported = HostEnv(from_source=True).check(lacking), HostEnv().check(lacking)
    assert not source.found and source == imported


def test_command_file_imports_neither_verl_nor_torch(make_plan, tmp_path):
    """`executor command-file` (what `twin plan` waits for) checks against verl without importing it."""
    plan = make_plan()
    script = ("import sys; from executor.cli import main\n"
              "sys.argv = ['executor', 'command-file', sys.argv[1], '-o', sys.argv[2]]\n"
              "try:\n    main()\nfinally:\n    print(sorted(m for m in ('verl', 'torch') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script, str(plan), str(tmp_path / "c.sh")], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "verl.trainer.main_ppo" in (tmp_path / "c.sh").read_text()


def test_cpu_target_patch_targets_from_source_match_the_import():
    """`executor run` checks the CPU target's patch targets in the installed source (the process that imports a
    patched module resolves it there): the source must say what the import says, for every target on this host."""
    from executor.cpu import megatron_compat, megatron_verl_compat, vllm_compat

    patches = (*vllm_compat.PATCHES, *megatron_compat.PATCHES, *megatron_verl_compat.PATCHES)
    targets = [t for p in patches for t, _ in getattr(p, "patches", ())]
    assert len(targets) > 20
    from_source = [HostEnv(from_source=True).check(t) for t in targets]
    assert [HostEnv().check(t) for t in targets] == from_source
    decided = [t for t in targets if in_source(t)]  # found from the source alone, not by the import fallback
    assert len(decided) == len(targets), sorted({t.label for t in targets} - {t.label for t in decided})
