"""ServerConfig's scheduler: vLLM V1's rules by default (chunked prefill on), draftsim's rules by name, the
refusals naming the field, and the scheduler registry (simulator/engine/scheduler.py SCHEDULERS)."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.scheduler import DEFAULT_SCHEDULER, SCHEDULERS, scheduler_variant
from simulator.server_config import RunSpec, ServerConfig, server_for
from tests.simulator.engine.engine_fixtures import iid_traces, simulate, workload
from traces.config_base import validate_model

BASE = {"target_profile": "x", "kv_capacity_tokens": 1000}


def test_default_config_resolves_to_vllm_v1_with_chunked_prefill():
    s = ServerConfig(**BASE)
    assert s.scheduler == "vllm-v1" == DEFAULT_SCHEDULER
    assert s.chunked_prefill is True and s.prefill == "mixed"
    # an explicit chunked_prefill: true beside the default is the same server
    assert ServerConfig(**BASE, chunked_prefill=True) == s


def test_draftsim_rules_by_name_keep_their_defaults():
    s = ServerConfig(**BASE, scheduler="draftsim")
    assert (s.scheduler, s.chunked_prefill, s.prefill) == ("draftsim", False, "mixed")
    sep = ServerConfig(**BASE, scheduler="draftsim", prefill="separate")
    assert (sep.chunked_prefill, sep.prefill) == (False, "separate")
    assert ServerConfig(**BASE, scheduler="draftsim", chunked_prefill=True).chunked_prefill is True


@pytest.mark.parametrize("given, field, why", [
    ({"chunked_prefill": False}, "server.chunked_prefill", "always chunks prefills"),
    ({"prefill": "separate"}, "server.prefill", "mixes prefill chunks into decode steps"),
    ({"scheduler": "vllm-v1", "chunked_prefill": False}, "server.chunked_prefill", "always chunks prefills"),
    ({"scheduler": "vllm-v1", "prefill": "separate"}, "server.prefill", "mixes prefill chunks"),
])
def test_refusals_name_the_field_and_the_scheduler_that_allows_it(given, field, why):
    with pytest.raises(ValueError) as e:
        validate_model(ServerConfig, {**BASE, **given}, "server")
    msg = str(e.value)
    assert msg.startswith(f"{field}: ")
    assert why in msg and "scheduler: draftsim" in msg
    assert ("(the default)" in msg) == ("scheduler" not in given)


def test_unknown_scheduler_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match=r"^server\.scheduler: expected 'draftsim' or 'vllm-v1', got 'sglang'"):
        validate_model(ServerConfig, {**BASE, "scheduler": "sglang"}, "server")
    with pytest.raises(ValueError, match="expected 'draftsim' or 'vllm-v1'"):
        scheduler_variant("sglang")


def test_a_run_override_switches_to_draftsim_rules():
    """A run's server overrides merge over the experiment's resolved server: switching to draftsim's prefill-only
    steps must also turn off the chunked prefill the default scheduler turned on."""
    exp = ServerConfig(**BASE)
    run = RunSpec(name="v0", mode="ar", server={"scheduler": "draftsim", "prefill": "separate",
                                                "chunked_prefill": False})
    s = server_for(exp, run)
    assert (s.scheduler, s.chunked_prefill, s.prefill) == ("draftsim", False, "separate")
    with pytest.raises(ValueError, match=r"runs\[v0\]\.server.*chunked_prefill: true"):
        server_for(exp, RunSpec(name="v0", mode="ar", server={"scheduler": "draftsim", "prefill": "separate"}))


def test_registry_records_say_what_each_variant_does():
    assert set(SCHEDULERS) == {"vllm-v1", "draftsim"}
    for name, v in SCHEDULERS.items():
        assert v.name == name and v.description and "\n" not in v.description
        assert v.modelled and v.not_modelled
    v1, old = SCHEDULERS["vllm-v1"], SCHEDULERS["draftsim"]
    assert v1.decodes_in_budget and v1.engine_loop_gap and v1.always_chunked
    assert not (old.decodes_in_budget or old.engine_loop_gap or old.always_chunked)


def test_default_and_draftsim_differ_where_the_budget_binds():
    """The default server schedules decodes within max_num_batched_tokens; draftsim's rules run every decode with
    all its drafts, over the budget (12 decoding requests x (1 + 4 drafts) = 60 tokens > 20)."""
    traces = iid_traces(20, seed=3, rate=0.7, prompt=(3, 8), out=(40, 80))
    wl = workload(traces, 40, rate=400.0)
    runs = {name: simulate(traces, wl, mode="sd", k=4, max_num_seqs=12, budget=20, chunked=True, scheduler=name)
            for name in ("vllm-v1", "draftsim")}
    for res in runs.values():
        assert int(res.steps.emitted_tokens.sum()) == int(wl.output_len.sum())
    tokens = {n: r.steps[r.steps.device == "target"].batched_tokens.to_numpy() for n, r in runs.items()}
    assert int(np.max(tokens["vllm-v1"])) <= 20 < int(np.max(tokens["draftsim"]))
