"""Suffix decoding's offline pass against a brute-force proposer written here from the rule (scan every earlier
occurrence of each matched suffix and count next tokens), a hand-worked case, bounds and cache order."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle
from traces.suffix_decoding import SubstringCounts, SuffixConfig, suffix_decoding_traces, with_suffix_decoding


# ---------------------------------------------------------------- the independent brute-force proposer


def _occurrences(seqs: list[list[int]], s: tuple, depth: int) -> int:
    """How many start positions in any sequence begin `s` (strings longer than the depth are not indexed)."""
    if len(s) > depth:
        return 0
    n = len(s)
    return sum(1 for q in seqs for i in range(len(q) - n + 1) if tuple(q[i:i + n]) == s)


def _brute_speculate(seqs, pattern, depth, k, factor, min_prob):
    """(tokens, score, tie) of the best greedy path over match lengths, by scanning the sequences directly; tie:
    a walk met two next tokens with the top count (vLLM then follows its sibling order, not rebuilt here)."""
    pattern = list(pattern)[-depth:]
    best, best_score, tie = [], np.float32(0.0), False
    for m in range(1, len(pattern)):
        ctx = tuple(pattern[-m:])
        if _occurrences(seqs, ctx, depth) == 0:
            break
        cap = max(0, min(k, int(m * factor + 1e-6)))
        toks, score, prob, cur = [], np.float32(0.0), np.float32(1.0), ctx
        while len(toks) < cap:
            counts = {}
            for q in seqs:  # every occurrence of cur that has a next token
                for i in range(len(q) - len(cur)):
                    if tuple(q[i:i + len(cur)]) == cur and len(cur) + 1 <= depth:
                        counts[q[i + len(cur)]] = counts.get(q[i + len(cur)], 0) + 1
            if not counts:
                break
            top = max(counts.values())
            tops = [t for t, c in counts.items() if c == top]
            tie |= len(tops) > 1
            tok = tops[0]
            prob = np.float32(prob * (np.float32(top) / np.float32(_occurrences(seqs, cur, depth))))
            if prob < np.float32(min_prob):
                break
            toks.append(tok)
            score = np.float32(score + prob)
            cur = cur + (tok,)
        if score >= best_score:
            best, best_score = toks, score
    return best, best_score, tie


def _brute_traces(requests, cfg: SuffixConfig):
    """Run the proposer online: request i sees its prompt + output so far locally, and in the global cache the
    full responses of earlier requests (the latest max_cached_requests, its own slot counted) and its own so far.
    Also returns, per request, which positions met a tie."""
    k = cfg.k
    out = []
    for i, (prompt, output) in enumerate(requests):
        acc = np.ones(len(output), dtype=np.int32)
        prop = np.zeros(len(output), dtype=np.int32)
        ties = np.zeros(len(output), dtype=bool)
        for p in range(len(output)):
            ctx = list(prompt) + list(output[:p])
            local, ls, lt = _brute_speculate([ctx], ctx, cfg.max_tree_depth, k, cfg.max_spec_factor, cfg.min_token_prob)
            if cfg.max_cached_requests == 0:
                glob, gs, gt = [], np.float32(0.0), False
            else:
                first = 0 if cfg.max_cached_requests < 0 else max(0, i + 1 - cfg.max_cached_requests)
                seqs = [list(o) for _, o in requests[first:i]] + [list(output[:p])]
                glob, gs, gt = _brute_speculate(seqs, ctx, cfg.max_tree_depth, k, cfg.max_spec_factor,
                                            cfg.min_token_prob)
            draft = glob if gs > ls else local
            ties[p] = lt or gt
            prop[p] = len(draft)
            n = 0
            while n < len(draft) and p + n < len(output) and draft[n] == output[p + n]:
                n += 1
            acc[p] = 1 + n
        out.append((acc, prop, ties))
    return out


# ---------------------------------------------------------------- tests


def test_hand_worked_case():
    # context 1 2 3 1 2: m=1 ("2", seen twice, once followed by 3) gives [3] at p=0.5 (cap 1);
    # m=2 ("1 2") gives [3 (0.5), 1 (0.5)] score 1.0 (cap 2); m=3, 4 have no continuation (score 0 < 1).
    counts = SubstringCounts(24)
    counts.extend(0, [1, 2, 3, 1, 2])
    d = counts.speculate([1, 2, 3, 1, 2], 24, 1.0, 0.1)
    assert d.token_ids == [3, 1] and d.match_len == 2 and d.score == pytest.approx(1.0)
    # the target then writes 3 1 5: both drafted tokens are accepted, so one step emits 3
    (acc, prop), = suffix_decoding_traces([([1, 2, 3, 1, 2], [3, 1, 5])], SuffixConfig())
    assert acc[0] == 3 and prop[0] == 2


def _kids(counts, ctx):
    return [(t, counts.count[tuple(ctx) + (t,)]) for t in counts.children[tuple(ctx)]]


def test_sibling_order_follows_arctic_inference():
    """Ties go by ArcticInference's sibling list (suffix_tree.cc): worked here for the children of context "1"."""
    c = SubstringCounts(2)
    c.extend(0, [1, 5, 1, 6, 1, 7])
    assert _kids(c, [1]) == [(5, 1), (6, 1), (7, 1)]  # a new child goes last
    c.extend(0, [1, 5])
    assert _kids(c, [1]) == [(5, 2), (6, 1), (7, 1)]  # the head of the list stays put
    c.extend(0, [1, 7])  # not the head of its run of 1s: moves to where that run began, behind the 2s
    assert _kids(c, [1]) == [(5, 2), (7, 2), (6, 1)]
    c.extend(0, [1, 6])  # head of its run, its previous sibling has the new count: moves before that run's head
    assert _kids(c, [1]) == [(6, 2), (5, 2), (7, 2)]
    assert c.speculate([9, 1], 1, 1.0, 0.0).token_ids == [6]
    c.remove(0)
    assert not c.count and not c.children


def test_equals_arctic_inference_where_installed():
    """vLLM's own proposer cache (ArcticInference), when importable, on streams full of ties and evictions."""
    ai = pytest.importorskip("arctic_inference.suffix_decoding")
    rng = np.random.default_rng(0)
    for depth, factor, min_prob, cached in ((4, 1.0, 0.1, 3), (6, 2.0, 0.0, -1), (24, 1.0, 0.1, 1)):
        cfg = SuffixConfig(max_tree_depth=depth, max_spec_factor=factor, min_token_prob=min_prob,
                           max_cached_requests=cached)
        reqs = [(list(rng.integers(0, 4, 12)), list(rng.integers(0, 4, 20))) for _ in range(8)]
        real = ai.SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=cached)
        props = []
        for i, (prompt, output) in enumerate(reqs):
            real.start_request(i, np.asarray(prompt, dtype=np.int32))
            ctx, prop = list(prompt), []
            for tok in output:
                d = real.speculate(i, np.asarray(ctx[-depth:], dtype=np.int32), max_spec_tokens=cfg.k,
                                   max_spec_factor=factor, min_token_prob=min_prob)
                prop.append(len(d.token_ids))
                real.add_active_response(i, [int(tok)])
                ctx.append(int(tok))
            real.stop_request(i)
            props.append(prop)
        for (_, got), want in zip(suffix_decoding_traces(reqs, cfg), props):
            assert got.tolist() == want


def test_min_token_prob_cuts_the_path():
    counts = SubstringCounts(24)
    counts.extend(0, [1, 2, 3, 1, 2])
    assert counts.speculate([1, 2, 3, 1, 2], 24, 1.0, 0.6).token_ids == []  # every path starts at 0.5


def test_global_cache_gives_an_earlier_response():
    earlier = ([9, 9], [5, 6, 7, 8, 5, 6])
    later = ([0, 5, 6], [7, 8, 1])
    with_cache = suffix_decoding_traces([earlier, later], SuffixConfig())[1]
    without = suffix_decoding_traces([earlier, later], SuffixConfig(max_cached_requests=0))[1]
    # at p=0 the context ends "5 6"; only the earlier response continues it: "5 6" twice, once followed by
    # "7 8", so m=2 proposes [7 (0.5), 8 (0.5)]; the target writes 7 8, both accepted
    assert with_cache[1][0] == 2 and with_cache[0][0] == 3
    assert without[1][0] == 0 and without[0][0] == 1


def test_the_cache_only_holds_earlier_requests():
    reqs = [([1, 2, 3], [4, 5, 6, 4, 5]), ([4, 5], [6, 4, 5, 6]), ([7], [4, 5, 6, 1])]
    full = suffix_decoding_traces(reqs, SuffixConfig())
    for j in range(1, len(reqs)):
        part = suffix_decoding_traces(reqs[:j], SuffixConfig())
        for (a, p), (fa, fp) in zip(part, full):
            assert np.array_equal(a, fa) and np.array_equal(p, fp)


def test_fifo_eviction_matches_the_brute_force():
    reqs = [([1], [2, 3, 4, 2, 3]), ([5], [6, 7]), ([2], [3, 4, 9])]
    cfg = SuffixConfig(max_cached_requests=2)
    for got, want in zip(suffix_decoding_traces(reqs, cfg), _brute_traces(reqs, cfg)):
        assert not want[2].any()  # no ties in this case: every position compares
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_config_errors_name_the_setting():
    with pytest.raises(ValueError, match="max_tree_depth"):
        SuffixConfig(max_tree_depth=0)
    with pytest.raises(ValueError, match="min_token_prob"):
        SuffixConfig(min_token_prob=1.5)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        SuffixConfig(num_speculative_tokens=0)


def _bundle(reqs, arrivals=None):
    rs = []
    for i, (p, o) in enumerate(reqs):
        rs.append(RequestTrace(f"r{i}", len(p), len(o), {"ngram": DrafterTrace(np.ones(len(o), np.int32))},
                               arrival_time=None if arrivals is None else arrivals[i],
                               prompt_token_ids=list(p), output_token_ids=list(o)))
    return TraceBundle(BundleMeta("t", {"ngram": DrafterSpec("ngram", "ngram", "ngram")}), rs)


def test_bundle_pass_uses_arrival_order_and_validates():
    reqs = [([5, 6], [7, 8, 1]), ([9, 9], [5, 6, 7, 8, 5, 6])]
    b = with_suffix_decoding(_bundle(reqs, arrivals=[2.0, 1.0]), SuffixConfig())
    b.validate()
    assert b.meta.drafters["suffix"].kind == "suffix"
    expected = suffix_decoding_traces([reqs[1], reqs[0]], SuffixConfig())  # r1 arrived first
    assert np.array_equal(b.requests[0].drafters["suffix"].proposal_len, expected[1][1])
    assert np.array_equal(b.requests[1].drafters["suffix"].acc_len, expected[0][0])


def test_bundle_without_token_ids_is_refused():
    b = _bundle([([1], [2])])
    b.requests[0].output_token_ids = None
    with pytest.raises(ValueError, match="r0.*token ids"):
        with_suffix_decoding(b, SuffixConfig())


_streams = st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=8),
                              st.lists(st.integers(0, 3), min_size=1, max_size=10)), min_size=1, max_size=4)
_configs = st.builds(SuffixConfig, max_tree_depth=st.integers(1, 7), max_spec_factor=st.sampled_from([0.5, 1.0, 2.5]),
                     min_token_prob=st.sampled_from([0.0, 0.1, 0.34, 0.5]),
                     max_cached_requests=st.sampled_from([-1, 0, 1, 2]),
                     num_speculative_tokens=st.one_of(st.none(), st.integers(1, 5)))


@settings(max_examples=150, deadline=None)
@given(_streams, _configs)
def test_pass_equals_the_brute_force_proposer(reqs, cfg):
    """Equal wherever no walk met tied counts (ties follow vLLM's sibling order: tested by hand below and against
    ArcticInference itself where it is importable)."""
    for got, want in zip(suffix_decoding_traces(reqs, cfg), _brute_traces(reqs, cfg)):
        free = ~want[2]
        assert np.array_equal(got[1][free], want[1][free])
        assert np.array_equal(got[0][free], want[0][free])


@settings(max_examples=150, deadline=None)
@given(_streams, _configs)
def test_proposals_stay_within_the_bounds(reqs, cfg):
    for (prompt, output), (acc, prop) in zip(reqs, suffix_decoding_traces(reqs, cfg)):
        assert (prop >= 0).all() and (prop <= cfg.k).all()
        assert (prop <= cfg.max_tree_depth - 1).all()  # match >= 1 and match + proposal <= depth
        assert (acc >= 1).all() and (acc - 1 <= prop).all()
        for p in range(len(output)):  # never more than the factor times the longest possible match
            longest = min(len(prompt) + p, cfg.max_tree_depth) - 1
            assert prop[p] <= int(longest * cfg.max_spec_factor + 1e-6)
