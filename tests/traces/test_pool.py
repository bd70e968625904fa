"""The synthetic drafter-pool generator: seeded, specialists strong on their category, drift mode, valid bundle."""
import numpy as np
import pytest

from traces.bundle import load_bundle, save_bundle
from traces.pool import (GENERALIST, PoolSpec, make_pool_bundle, match_runs, pool_drafters, request_segments,
                         specialist_name)


def test_same_seed_same_bundle_and_other_seed_differs():
    a = make_pool_bundle(PoolSpec(num_requests=5, seed=3))
    b = make_pool_bundle(PoolSpec(num_requests=5, seed=3))
    c = make_pool_bundle(PoolSpec(num_requests=5, seed=4))
    for ra, rb in zip(a.requests, b.requests):
        for d in ra.drafters:
            assert (ra.drafters[d].acc_len == rb.drafters[d].acc_len).all()
            assert (ra.drafters[d].tv == rb.drafters[d].tv).all()
    assert any((ra.drafters[d].tv != rc.drafters[d].tv).any() if ra.output_len == rc.output_len else True
               for ra, rc in zip(a.requests, c.requests) for d in ra.drafters)


def test_specialist_is_strong_on_its_category_and_weak_elsewhere():
    spec = PoolSpec(num_requests=60, strong=0.8, weak=0.3, generalist=0.55, seed=1)
    b = make_pool_bundle(spec)
    own, other, gen = [], [], []
    for r in b.requests:
        for d, t in r.drafters.items():
            q = float((1 - t.tv).mean())
            if d == GENERALIST:
                gen.append(q)
            elif d == specialist_name(r.category):
                own.append(q)
            else:
                other.append(q)
    assert abs(np.mean(own) - 0.8) < 0.03
    assert abs(np.mean(other) - 0.3) < 0.03
    assert abs(np.mean(gen) - 0.55) < 0.03


def test_acc_len_is_the_run_of_matches_and_agrees_with_tv_on_average():
    b = make_pool_bundle(PoolSpec(num_requests=30, seed=2))
    q_all, m_all = [], []
    for r in b.requests:
        for t in r.drafters.values():
            n = r.output_len
            assert (t.acc_len >= 1).all() and (t.acc_len <= np.maximum(n - 1 - np.arange(n), 1)).all()
            match = t.acc_len > 1  # a match at p means the run from p is >= 1
            q_all.append(1 - t.tv[:-2])
            m_all.append(match[:-2])
    q, m = np.concatenate(q_all), np.concatenate(m_all)
    assert abs(m.mean() - q.mean()) < 0.01


def test_match_runs():
    m = np.array([True, True, False, True, True, True])
    assert match_runs(m).tolist() == [2, 1, 0, 1, 0, 0]
    assert match_runs(np.ones(4, bool)).tolist() == [2, 1, 0, 0]


def test_drift_mode_changes_category_inside_a_request(tmp_path):
    spec = PoolSpec(num_requests=4, drift=True, segments=3, output_len=(300, 300), seed=5)
    b = make_pool_bundle(spec)
    save_bundle(b, tmp_path / "pool")
    back = load_bundle(tmp_path / "pool")
    for r in back.requests:
        segs = request_segments(back, r)
        assert [s for s, _ in segs] == [0, 100, 200]
        assert len({c for _, c in segs}) == 3
        assert r.category == ">".join(c for _, c in segs)
        for (s, c), e in zip(segs, [100, 200, 300]):
            strong = 1 - r.drafters[specialist_name(c)].tv[s:e].mean()
            others = [1 - r.drafters[d].tv[s:e].mean() for d in pool_drafters(spec) if d != specialist_name(c)]
            assert strong > max(others)


def test_bad_spec_names_the_parameter():
    with pytest.raises(ValueError, match="strong"):
        make_pool_bundle(PoolSpec(strong=1.5))
    with pytest.raises(ValueError, match="segments"):
        make_pool_bundle(PoolSpec(drift=True, segments=9))
    with pytest.raises(ValueError, match="output_len"):
        make_pool_bundle(PoolSpec(output_len=(10, 5)))
