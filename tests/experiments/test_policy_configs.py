"""The shipped policy experiment configs validate and every run's policy builds from its spec."""
import pytest

from experiments.config import builtin_configs, load_config
from policies.registry import make_policy


@pytest.mark.parametrize("name", ["bandit_drafters", "adaptive_combine"])
def test_config_validates_and_policies_build(name):
    cfg = load_config(builtin_configs()[name])
    assert cfg.baseline_run == "AR"
    for run in cfg.runs:
        if run.policy:
            make_policy(run.policy, where=f"{name}.runs[{run.name}].policy")
            drafters = getattr(run.policy, "drafters", None) or [getattr(run.policy, "drafter", None)]
            for d in drafters:
                if d is not None:
                    assert d in cfg.drafters, f"{run.name}: drafter {d} has no cost in drafters:"
