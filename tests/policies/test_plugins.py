"""Plug-in policies: the docs' example runs from its config by file path, from an entry point of an installed
package, in sweeps (worker processes), plans and the live runner's checks; bad plug-ins are named clearly."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

import oracle.registry  # noqa: F401  (registers the ground-truth policies)
from experiments.config import ConfigError, load_config, read_config_doc
from experiments.run import run_experiment
from oracle.exact import min_steps_plan
from oracle.regret import run_rounds
from policies.registry import ENTRY_POINT_GROUP, known_policy_names, make_policy, policy_class
from traces.bundle import DrafterTrace, RequestTrace

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "docs/examples/aimd_k_policy.py:AIMDKPolicy"
EXAMPLE_CONFIG = ROOT / "docs" / "examples" / "aimd_k.yaml"


@pytest.fixture
def at_root(monkeypatch):
    """The example config names its policy file relative to the repository root, as a user runs it."""
    monkeypatch.chdir(ROOT)


def _request(acc_len, rid="r"):
    acc = np.asarray(acc_len, dtype=np.int32)
    return RequestTrace(id=rid, prompt_len=8, output_len=acc.shape[0], drafters={"d": DrafterTrace(acc_len=acc)})


def test_the_docs_example_runs_from_its_config_and_adapts_k(at_root):
    res = run_experiment(EXAMPLE_CONFIG, overrides=["workload.num_requests=120"], seed=3)
    s = res.summary
    assert list(s) == ["AR", "eagle3-k3", "aimd-k"]

    def per_step(run):
        req = res.requests[res.requests["run"] == run]
        steps = req["decode_steps"].to_numpy(float)
        return req["proposed_tokens"].to_numpy(float)[steps > 0] / steps[steps > 0]

    # the plug-in really chose: its mean k differs from request to request, where fixed k = 3 proposes 3 per
    # step (fewer only in a request's last steps), and never exceeds the plug-in's k_max of 8
    aimd, fixed = per_step("aimd-k"), per_step("eagle3-k3")
    assert np.median(fixed) > 2.8 and fixed.max() <= 3
    assert aimd.std() > 3 * fixed.std() and aimd.min() < 2.0 and aimd.max() <= 8
    assert s["aimd-k"]["mean_acceptance_length"] > 1.0
    assert s["aimd-k"]["num_finished"] == 120


def test_the_example_follows_its_rule_in_the_regret_runner():
    rng = np.random.default_rng(0)
    cls = policy_class(f"{ROOT / 'docs/examples/aimd_k_policy.py'}:AIMDKPolicy")  # an absolute path works too
    # every proposal accepted: k climbs 2, 3, ..., 8 and stays at k_max
    always = run_rounds(cls("d", k_start=2, k_max=8), _request([40] * 200), ["d"], 64, 200, rng)
    assert always.proposed.tolist()[:8] == [2, 3, 4, 5, 6, 7, 8, 8]
    # nothing ever accepted: k halves to k_min and stays
    never = run_rounds(cls("d", k_start=4, k_min=1), _request([1] * 30), ["d"], 64, 30, rng)
    assert never.proposed.tolist()[:4] == [4, 2, 1, 1] and never.accepted.sum() == 0


def test_the_example_never_beats_the_exact_oracle():
    rng = np.random.default_rng(1)
    acc = rng.integers(1, 7, size=300)
    req = _request(acc)
    pol = make_policy({"name": str(ROOT / "docs/examples/aimd_k_policy.py") + ":AIMDKPolicy", "drafter": "d"})
    rounds = run_rounds(pol, req, ["d"], 64, 300, rng).rounds
    best = min_steps_plan(req, ["d"], {"d": 8})  # fewest steps any policy drafting at most 8 tokens can take
    oracle = make_policy({"name": "oracle-k", "drafter": "d", "k_max": 8, "plan": "min-steps"})
    oracle.bind_ground_truth({"r": req})
    assert run_rounds(oracle, req, ["d"], 64, 300, rng).rounds == best.steps <= rounds


def test_bad_plugin_parameters_fail_with_the_whole_config(at_root, tmp_path):
    doc, _ = read_config_doc(EXAMPLE_CONFIG)
    doc["runs"][2]["policy"]["k_maxx"] = 9
    with pytest.raises(ConfigError, match=r"runs\.2\.policy.*unknown parameter\(s\) \['k_maxx'\].*expected some of "
                                          r"\['drafter', 'k_max', 'k_min', 'k_start'\]"):
        load_config(doc)
    doc["runs"][2]["policy"] = {"name": EXAMPLE, "drafter": "eagle3", "k_max": 2.5}
    with pytest.raises(ConfigError, match=r"k_max: expected a valid integer \(got 2.5\)"):
        load_config(doc)
    doc["runs"][2]["policy"] = {"name": EXAMPLE, "drafter": "eagle3", "k_start": 9}  # the class's own check
    with pytest.raises(ConfigError, match=r"k_min <= k_start <= k_max"):
        load_config(doc)


@pytest.mark.parametrize("name, match", [
    ("docs/examples/aimd_k_policy.py:AIMDKPolcy", r"has no attribute 'AIMDKPolcy' \(did you mean 'AIMDKPolicy'\?\)"),
    ("docs/examples/missing.py:X", r"policy file 'docs/examples/missing.py' not found"),
    ("no_such_pkg.mod:X", r"'no_such_pkg.mod' is not importable: install its package, add .* PYTHONPATH"),
    ("json:dumps", r"not a subclass of policies.base.Policy"),
    ("metasd-ucbb", r"unknown policy 'metasd-ucbb' \(did you mean 'metasd-ucb'"),
    ("docs/examples/aimd_k_policy.py:", r"an import path is 'package.module:Class'"),
])
def test_bad_policy_names_say_what_is_wrong(at_root, name, match):
    with pytest.raises(ValueError, match=match):
        make_policy({"name": name, "drafter": "d"}, where="runs.1.policy")


def test_a_plugin_that_fails_to_import_names_its_error(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(ValueError, match=r"importing '.*broken.py' failed: RuntimeError: no GPU here"):
        policy_class(f"{tmp_path / 'broken.py'}:P")


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """A package installed the way pip leaves one: a module and a dist-info folder with entry_points.txt."""
    (tmp_path / "demo_policies.py").write_text(textwrap.dedent("""
        from policies.base import Choice, Policy

        class AlwaysTwo(Policy):
            name = "demo-always-two"
            description = "k = 2 with one drafter"
            learns = False

            def __init__(self, drafter: str):
                self.drafter = drafter

            def drafters_used(self):
                return (self.drafter,)

            def max_draft_tokens(self):
                return 2

            def choose(self, view):
                return Choice(self.drafter, 2)
    """))
    info = tmp_path / "demo_policies-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-policies\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\ndemo-always-two = demo_policies:AlwaysTwo\n"
                                           "demo-broken = demo_policies:Missing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_an_entry_point_policy_runs_in_a_config_and_is_listed(installed_plugin):
    from experiments.cli.policies import policy_listing

    assert "demo-always-two" in known_policy_names()
    listed = {e["name"]: e for e in policy_listing()}
    assert listed["demo-always-two"]["parameters"] == {"drafter": "<required>"}
    assert listed["demo-always-two"]["source"] == "plug-in (demo-policies 0.1)"
    assert listed["demo-broken"]["description"].startswith("cannot load: ") and listed["ucb"]["source"] == "built-in"
    from tests.experiments.test_sweep_spec import BASE

    cfg = {**BASE, "runs": [{"name": "two", "mode": "sd", "policy": {"name": "demo-always-two", "drafter": "eagle3"}}]}
    req = run_experiment(cfg).requests
    ratio = req["proposed_tokens"].sum() / req["decode_steps"].sum()
    assert 1.5 < ratio <= 2.0  # k = 2 everywhere (the last steps of a request may propose fewer)
    with pytest.raises(ValueError, match=r"demo-broken.*entry point 'demo_policies:Missing'.*loading failed"):
        make_policy({"name": "demo-broken"})
    with pytest.raises(ValueError, match=r"did you mean 'demo-always-two'"):
        make_policy({"name": "demo-always-tw"})


def test_a_plugin_runs_in_a_pool_sweep(at_root, tmp_path):
    from experiments.sweep.experiment import run_sweep
    from tests.experiments.test_sweep_spec import BASE

    runs = [{"name": "aimd", "mode": "sd", "policy": {"name": EXAMPLE, "drafter": "eagle3", "k_start": 1}}]
    cfg = load_config({**BASE, "runs": runs, "sweep": {"grid": {"runs.0.policy.k_max": [1, 6]}}})
    doc = run_sweep(cfg, tmp_path / "sw", backend="pool", workers=2, progress=False)
    accept = [p["summary"]["aimd"]["mean_acceptance_length"] for p in doc["points"]]
    assert accept[0] <= 2.0 < accept[1]  # k_max = 1 caps a step at 2 tokens; 6 lets k grow


def test_the_live_runner_checks_a_plugin_before_any_model_loads(at_root):
    from calibration.live.records import refuse_oracle
    from calibration.live.runner import parse_batch_modes

    modes, _ = parse_batch_modes(["ar"], [{"name": EXAMPLE, "drafter": "int8", "label": "aimd"}])
    assert [m.name for m in modes] == ["AR", "aimd"]
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['k'\]"):
        parse_batch_modes([], [{"name": EXAMPLE, "drafter": "int8", "k": 3}])
    with pytest.raises(ValueError, match="is an oracle"):
        refuse_oracle({"name": "oracle-k"}, "--policy 1")


def test_a_plugin_runs_in_a_plan(at_root, known_case, tmp_path):
    from experiments.plan.planner import run_plan
    from experiments.plan.config import load_plan_config

    known_case["candidates"]["modes"] = [
        {"name": "aimd", "mode": "sd", "policy": {"name": EXAMPLE, "drafter": "d", "k_start": 1, "k_max": 1}}]
    doc = run_plan(load_plan_config(known_case), tmp_path / "plan", progress=False, backend="serial")
    (c,) = doc["candidates"]
    assert c["status"] == "ok" and c["max_rate_req_s"] > 0
    known_case["candidates"]["modes"][0]["policy"]["k_mx"] = 1
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['k_mx'\]"):
        run_plan(load_plan_config(known_case), tmp_path / "p2", progress=False, backend="serial")


from tests.experiments.test_plan import known_case  # noqa: E402,F401  (fixture)
