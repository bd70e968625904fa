"""Every benchmark module imports (its names still exist after a refactor) and its command line parses --help."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")


def test_the_benchmarks_folder_holds_modules():
    assert len(MODULES) >= 10


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_module_imports(name):
    importlib.import_module(f"benchmarks.{name}")


@pytest.mark.parametrize("name", [m for m in MODULES if m != "published_rows"])
def test_a_benchmark_command_prints_its_help(name):
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage" in done.stdout.lower()
