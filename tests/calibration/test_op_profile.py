"""Measured-ops profiles (calibration/op_profile.py): the grid fit on closed-form tables (no package needed), the
file round trip through the engine's profile reader, and, with aiconfigurator-core installed, the shipped H100
tables against the SpecDecode-Bench release's measured Llama-3.1-8B / H100 fit."""
from __future__ import annotations

import pytest

from calibration.op_profile import build_profile, default_grid, main
from simulator.costs.latency import load_profile, save_profile
from simulator.costs.roofline import profile_from_ref
from simulator.costs.step_model import StepShape


class LinearOps:
    """Tables whose step price is exactly linear in the structured model's terms: GEMM ~ m, attention ~ KV read,
    prompt attention free, all-reduce ~ elements."""

    def gemm_s(self, m, n, k):
        return 1e-6 + 1e-12 * m * n * k / 4096

    def generation_attention_s(self, batch, kv_len, heads, kv_heads, head_dim):
        return 2e-9 * batch * kv_len

    def context_attention_s(self, batch, isl, heads, kv_heads, head_dim):
        return 0.0

    def allreduce_s(self, elements, gpus, graph=True):
        return 1e-6 + 1e-12 * elements


def test_grid_fit_recovers_a_linear_truth_and_states_its_provenance(tmp_path):
    prof = build_profile("llama3.1-8b", "h100-80gb", tp=2, ops=LinearOps(), name="toy")
    assert prof.fit["grid_max_error_percent"] < 0.5
    assert prof.provenance.source == "measured-ops" and "hand-made tables" in prof.provenance.notes
    assert "one KV pass" in prof.provenance.notes and prof.provenance.backend == "vllm 0.24.0"
    path = save_profile(prof, tmp_path / "p.yaml")
    back = profile_from_ref(str(path))  # what server.target_profile resolves
    s = StepShape(decode_seqs=16, draft_tokens=48, decode_kv=16 * 900)
    assert back.kind == "structured" and back.shape_time(s) == pytest.approx(prof.shape_time(s))
    assert len(load_profile(path).measurements) == len(default_grid())


def test_every_catalog_gpu_has_a_table_system():
    from calibration.op_profile import SYSTEMS
    from traces.catalog import builtin_gpus

    assert set(builtin_gpus()) <= set(SYSTEMS)


def test_cli_never_overwrites(tmp_path, capsys):
    out = tmp_path / "p.yaml"
    out.write_text("mine\n")
    assert main(["--model", "llama3.1-8b", "--gpu", "h100-80gb", "--out", str(out)]) == 2
    assert out.read_text() == "mine\n" and "not overwritten" in capsys.readouterr().err


def test_shipped_h100_tables_price_llama8b_decode_near_the_measured_fit(tmp_path):
    pytest.importorskip("aiconfigurator_core")
    from simulator.costs.latency import resolve_profile

    fit = resolve_profile("llama3.1-8b-h100-specbench")  # vLLM 0.10.1, measured on an H100 (independent)
    prof = build_profile("llama3.1-8b", "h100-80gb", tp=1, version="0.24.0")
    for b in (1, 8, 32, 128):
        ours = prof.shape_time(StepShape(b, 0, b * 1100))
        theirs = fit.step_time(b, b, b * 1100)
        assert abs(ours / theirs - 1) < 0.15, (b, ours, theirs)
    assert main(["--model", "llama3.1-8b", "--gpu", "h100-80gb", "--out", str(tmp_path / "x.yaml")]) == 0
    assert load_profile(tmp_path / "x.yaml").provenance.versions["aiconfigurator-core"] == "0.12.0"


@pytest.mark.parametrize("gpu", ["h200-141gb", "a100-80gb", "l40s"])
def test_shipped_tables_cover_every_catalog_gpu(gpu):
    pytest.importorskip("aiconfigurator_core")
    prof = build_profile("llama3.1-8b", gpu, tp=1, version="0.24.0", grid=default_grid(batches=(1, 16, 128)))
    assert prof.fit["grid_mape_percent_by_phase"]["all"] < 15
    assert prof.provenance.device.startswith("1x NVIDIA")


def test_a_shape_the_tables_lack_is_named():
    pytest.importorskip("aiconfigurator_core")
    with pytest.raises(ValueError, match="a100_sxm vllm 0.24.0 generation_attention: no rows for 8 KV heads of "
                                         "dimension 64"):
        build_profile("llama3.2-1b", "a100-80gb", grid=default_grid(batches=(1,)))
