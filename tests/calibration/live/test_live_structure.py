"""The live code's structure: the live runner imports nothing private, the
target and drafters are loaded in one place (calibration/models/loading.py), and the calibrate CLI only parses arguments."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BATCHED = ["calibration/live/runner.py", "calibration/live/batched.py", "calibration/live/psd_workers.py",
           "calibration/live/draft_engine.py", "calibration/live/batched_kv.py", "calibration/live/batched_profile.py"]


def _imports(path: str) -> list[tuple[str, str]]:
    """(module, name) of every `from X import name` in a file, at any depth."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return [(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]


def _calls(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}


def test_the_live_path_imports_no_private_name():
    for path in BATCHED:
        for module, name in _imports(path):
            if module.startswith("calibration"):
                assert not name.startswith("_"), f"{path} imports private {module}.{name}"


def test_models_are_loaded_in_one_place():
    files = [p.relative_to(ROOT).as_posix() for folder in ("calibration", "experiments") for p in (ROOT / folder).rglob("*.py")]
    loaders = {f for f in files if {"load_model", "parse_drafter"} & _calls(f)}
    # models.py loads a target and builds its drafters; drafters.py's model:PATH spec loads that drafter's model
    assert loaders <= {"calibration/models/loading.py", "calibration/models/drafters.py"}, loaders


def test_the_calibrate_cli_only_parses_arguments():
    path = "experiments/cli/calibrate.py"
    imported = {m for m, _ in _imports(path)}
    assert "calibration.models.hf_backend" not in imported and "calibration.models.drafters" not in imported
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    plain = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "torch" not in plain
