"""The one switch of the engine path a rule test runs on (tests/simulator/engine/test_rules_*.py).

`engine_path` parametrizes a test over every path that restates the step rules: "steps" (step by step: the
scheduler, step executors and step outcome), "macro" (the step path with numpy macro-steps, step_runs.py) and
"compiled" (the numba kernels, forced with DRAFTSIM_ENGINE=compiled so small runs take them too). `step_path`
is the same without "compiled", for rules the compiled path never reaches (preemption, vLLM V1 rules, policies it
does not compile). `rule_cases.run` checks that the run took the path asked for.
"""
from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from simulator.engine import compiled_run, step_runs

# `pytest --hypothesis-profile=rules-no-shrink`: report a failing drawn case without shrinking it (the mutation
# check of MUTATIONS.md only needs to know which rule test fails)
settings.register_profile("rules-no-shrink", phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _force(path: str, monkeypatch) -> str:
    if path == "compiled":
        monkeypatch.setattr(compiled_run, "COMPILED", True)
        monkeypatch.setattr(step_runs, "MACRO_STEPS", False)
        monkeypatch.setenv(compiled_run.ENGINE_ENV, "compiled")
    else:
        monkeypatch.delenv(compiled_run.ENGINE_ENV, raising=False)
        monkeypatch.setattr(compiled_run, "COMPILED", False)
        monkeypatch.setattr(step_runs, "MACRO_STEPS", path == "macro")
    return path


@pytest.fixture(params=["steps", "macro", "compiled"])
def engine_path(request, monkeypatch) -> str:
    return _force(request.param, monkeypatch)


@pytest.fixture(params=["steps", "macro"])
def step_path(request, monkeypatch) -> str:
    return _force(request.param, monkeypatch)
