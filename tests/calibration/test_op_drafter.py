"""Drafter forwards from measured op tables (calibration/op_drafter.py): an EAGLE-3 head's and a draft model's ops
by hand on a fake table, the drafting phase as the engine's autoregressive rule, the host-term fit recovering a
planted constant, the profile's round trip into a draft cost; with aiconfigurator-core, the shipped fit re-fitted."""
from __future__ import annotations

import pytest

from calibration.op_drafter import (EAGLE3_DRAFT_VOCAB, PROPOSAL_HOST_S, build_drafter_profile, drafter_cost,
                                    drafter_step_model, drafting_phase_s, fit_proposal_host_s, head_spec, main)
from calibration.op_step import ELEMENTWISE_BANDWIDTH_UTIL, OpStepModel
from simulator.costs.draft_cost import draft_cost_from_config
from simulator.costs.latency import save_profile
from simulator.costs.step_model import StepShape
from tests.calibration.test_op_profile import LinearOps
from tests.calibration.test_op_step import FakeOps
from traces.catalog import get_gpu, get_model

H100 = get_gpu("h100-80gb")


def test_eagle3_head_forward_by_hand():
    ops = FakeOps()
    step = drafter_step_model("eagle3", get_model("llama3.1-8b"), H100, ops, tp=1)
    t = step.step_time(4, 4, 4000)  # 4 sequences, one token each, 1,000 context tokens apiece
    h, i = 4096, 14336
    gemms = (4 * (48 * 128) * 2 * h  # QKV over embedding + hidden (2 h in)
             + 4 * h * 4096 + 4 * 2 * i * h + 4 * h * i  # o-proj, gate+up, down: one layer
             + 4 * EAGLE3_DRAFT_VOCAB * h  # LM head over the draft vocabulary
             + 4 * h * 3 * h)  # fusion of three target hidden states
    attention = 4 * 1000 * 32  # one layer, 32 query heads
    elementwise = 4 * (2 * (2 * h + 2 * h) + 3 * i + h) * 2 / (H100.bandwidth_bytes_s * ELEMENTWISE_BANDWIDTH_UTIL)
    assert t == pytest.approx((gemms + attention) * 1e-9 + elementwise, rel=1e-12)
    assert ("gen", 4, 1000.0, 32, 8, 128) in ops.calls


def test_a_head_at_tp2_is_sharded_and_pays_three_allreduces():
    ops = FakeOps()
    step = drafter_step_model("eagle3", get_model("llama3.1-8b"), H100, ops, tp=2)
    # 2 sequences over 100 context tokens each: 2 all-reduces per layer + 1, of B x hidden elements
    assert step.parts(StepShape(2, 0, 200)).allreduce == pytest.approx(3 * 2 * 4096 * 1e-9)
    assert ("gen", 2, 100.0, 16, 4, 128) in ops.calls  # 32 heads / 2, 8 KV heads / 2
    assert ("gemm", 2, EAGLE3_DRAFT_VOCAB // 2, 4096) in ops.calls


def test_eagle_head_fuses_two_hidden_states_over_the_targets_vocabulary():
    spec = head_spec(get_model("llama3.1-8b"), "eagle")
    assert (spec.num_layers, spec.vocab_size) == (1, 128256)
    ops = FakeOps()
    drafter_step_model("eagle", get_model("llama3.1-8b"), H100, ops).step_time(1, 1, 10)
    assert ("gemm", 1, 4096, 2 * 4096) in ops.calls and ("gemm", 1, 48 * 128, 4096) in ops.calls


def test_a_draft_model_is_priced_as_itself():
    a = drafter_step_model("draft_model", get_model("llama3.3-70b"), H100, FakeOps(), tp=2,
                           drafter=get_model("llama3.2-1b"))
    b = OpStepModel(get_model("llama3.2-1b"), H100, FakeOps(), tp=2)
    assert a.step_time(8, 8, 2400) == b.step_time(8, 8, 2400)
    with pytest.raises(ValueError, match="needs the draft model"):
        drafter_step_model("draft_model", get_model("llama3.3-70b"), H100, FakeOps())
    with pytest.raises(ValueError, match="expected one of"):
        drafter_step_model("medusa", get_model("llama3.3-70b"), H100, FakeOps())


def test_drafting_phase_is_k_forwards_with_the_kv_growing():
    step = drafter_step_model("eagle3", get_model("llama3.1-8b"), H100, FakeOps())
    want = step.step_time(3, 3, 300) + step.step_time(3, 3, 303) + step.step_time(3, 3, 306)
    assert drafting_phase_s(step, 3, 3, 300) == pytest.approx(want, rel=1e-12)


class Measured:
    """A whole-phase profile: the op model's k forwards plus a planted constant (k = batched tokens / seqs)."""

    def __init__(self, step, host):
        self.step, self.host = step, host

    def step_time(self, seqs, tokens, kv):
        return drafting_phase_s(self.step, seqs, tokens // seqs, kv) + self.host


def test_host_fit_recovers_a_planted_constant_and_by_hand():
    step = drafter_step_model("eagle3", get_model("llama3.1-8b"), H100, FakeOps())
    f = fit_proposal_host_s(step, Measured(step, 0.0013))
    assert f.host_s == pytest.approx(0.0013, rel=1e-9) and f.mean_abs_error_percent == pytest.approx(0.0, abs=1e-7)
    assert f.points == 8 * 5 * 3

    class Flat:
        def __init__(self, s):
            self.s = s

        def step_time(self, seqs, tokens, kv):
            return self.s

    forward = step.step_time(1, 1, 100)  # 0.41 s on the fake table
    one = fit_proposal_host_s(step, Flat(1.0), batches=(1,), ks=(1,), contexts=(100,))
    assert one.host_s == pytest.approx(1.0 - forward, rel=1e-12) and one.residual_min_s == one.residual_max_s
    # a measured phase faster than the forwards leaves no host work (never negative)
    assert fit_proposal_host_s(step, Flat(0.1), batches=(1,), ks=(1,), contexts=(100,)).host_s == 0.0


def test_profile_round_trip_into_a_draft_cost(tmp_path):
    prof = build_drafter_profile("draft_model", "llama3.3-70b", "h100-80gb", tp=2, drafter="llama3.2-1b",
                                 ops=LinearOps(), name="toy")
    notes = prof.provenance.notes
    assert prof.provenance.source == "measured-ops" and "draft model llama3.2-1b" in notes and "TP 2" in notes
    assert f"{PROPOSAL_HOST_S * 1e3:.2f} ms" in notes and prof.fit["grid_max_error_percent"] < 10
    path = save_profile(prof, tmp_path / "d.yaml")
    cost = draft_cost_from_config(drafter_cost(str(path)))
    forwards = sum(prof.step_time(4, 4, 800 + 4 * i) for i in range(5))
    assert cost.draft_time(4, 20, 5, 800, 0.0) == pytest.approx(forwards + PROPOSAL_HOST_S, rel=1e-12)
    head = build_drafter_profile("eagle3", "llama3.1-8b", "h100-80gb", ops=LinearOps(), name="h")
    assert "eagle3 head of llama3.1-8b" in head.provenance.notes and "QKV input 8192" in head.provenance.notes


def test_cli_never_overwrites(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    out.write_text("mine\n")
    assert main(["--method", "eagle3", "--target", "llama3.1-8b", "--gpu", "h100-80gb", "--out", str(out)]) == 2
    assert out.read_text() == "mine\n" and "not overwritten" in capsys.readouterr().err


def test_shipped_host_term_is_the_fit_on_the_shipped_tables():
    pytest.importorskip("aiconfigurator_core", reason="needs aiconfigurator-core's tables (optional extra)")
    from calibration.op_tables import load_op_tables
    from simulator.costs.latency import resolve_profile

    step = drafter_step_model("eagle3", get_model("llama3.1-8b"), H100, load_op_tables("h100_sxm", "0.24.0"))
    measured = resolve_profile("eagle3-llama3.1-8b-h100-specbench")  # vLLM 0.10.1, measured: independent
    f = fit_proposal_host_s(step, measured)
    assert f.host_s == pytest.approx(PROPOSAL_HOST_S, abs=5e-6)
    for b in (1, 8, 32, 128):  # at the paper's k = 3: the op forwards plus the host term within 10% of the fit
        ours = drafting_phase_s(step, b, 3, b * 1100) + PROPOSAL_HOST_S
        assert abs(ours / measured.step_time(b, 3 * b, b * 1100) - 1) < 0.10, b
