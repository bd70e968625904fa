"""The one switch of the engine path a rule test runs on (tests/simulator/engine/test_rules_*.py).

`engine_path` parametrizes a test over both paths that hold the step rules: "compiled" (the numba kernels, which
every run takes, docs/architecture.md) and "steps" (step by step: the scheduler, step executors and step outcome;
`compiled_run.COMPILED = False`, the tests' second reading). `rule_cases.run` checks that the run took the path
asked for.
"""
from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from simulator.engine import compiled_run

# `pytest --hypothesis-profile=rules-no-shrink`: report a failing drawn case without shrinking it (the mutation
# check of MUTATIONS.md only needs to know which rule test fails)
settings.register_profile("rules-no-shrink", phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _force(path: str, monkeypatch) -> str:
    monkeypatch.setattr(compiled_run, "COMPILED", path == "compiled")
    return path


@pytest.fixture(params=["steps", "compiled"])
def engine_path(request, monkeypatch) -> str:
    return _force(request.param, monkeypatch)

