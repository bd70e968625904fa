"""Suffix decoding (vLLM method `suffix`) replayed offline from token ids into `proposal_len` / `acc_len`.

What vLLM runs (read at vllm-project/vllm `vllm/v1/spec_decode/suffix_decoding.py`, snowflakedb/ArcticInference
`arctic_inference/suffix_decoding/cache.py` and `csrc/suffix_decoding/suffix_tree.cc`):
- Per request, a *local* suffix tree over prompt + the request's own output so far (`start_request` then
  `add_active_response` after every step). A *global* suffix tree over responses only (never prompts): a request
  gets a slot in it at `start_request`, and its tokens are appended as they are sampled, so the global tree holds
  the partial responses of running requests (its own included) and the full responses of finished ones, not only
  finished ones. At most `suffix_decoding_max_cached_requests` responses are kept, evicted FIFO by start order
  (default 10000; 0 disables the global tree).
- Both trees index every substring of length <= `suffix_decoding_max_tree_depth` (default 24); a node's count
  is the number of occurrences of its string. The pattern is the last min(depth, num_tokens) tokens of the
  context; for every match length m = 1 .. len(pattern) - 1 whose last-m tokens occur in the tree, the proposal is
  the greedy path below that node: take the child with the largest count, its probability is the product of
  count(child) / count(parent) along the path, stop when the next token's probability < `min_token_prob`
  (default 0.1), when the path ends (depth limit included: match + proposal <= depth) or at
  max_tokens = min(num_speculative_tokens, floor(m * `max_spec_factor` + 1e-6)) (factor default 1.0; vLLM
  passes no offset). Score = sum of the tokens' probabilities; the best score wins, ties go to the longer match.
  The global tree's best replaces the local one's only if its score is strictly higher.
  `num_speculative_tokens` defaults to the tree depth for this method (vLLM's SpeculativeConfig). vLLM also caps
  a proposal at max_model_len - num_tokens - 1; this pass assumes no request comes that close to max_model_len.
- float32 probabilities and scores, as the C++ computes them. Children with equal counts: the C++ takes the head
  of a sibling list kept sorted by count, where a new child goes last and a child whose count grows moves before
  the head of the run it joins or leaves (`_increment_count`, `_decrement_count`); this pass keeps the same list.
  Checked: ArcticInference's SuffixDecodingCache (built from snowflakedb/ArcticInference 9d46438) driven like vLLM's
  proposer gives the same proposal at all 11,409 code-edit and 11,475 chat positions of the shipped SmolLM2 bundles,
  at the defaults, with no global cache, with 5 cached responses (evictions), and at depth 8 / factor 2 / prob 0.

The assumption that makes an offline pass exact: the target's greedy output is fixed by its prompt, so the
context at every position is known in advance, and the global cache at request i is fixed by the order requests
run. This pass uses *arrival order, each request finished before the next starts* (batch 1): request i sees the
full responses of requests 0..i-1 (the most recent `max_cached_requests`) plus its own output so far. Under
concurrent serving the global tree would instead hold partial responses of requests running alongside, so
acceptance depends on scheduling; replaying this trace at a higher batch gives the sequential cache's proposals.
The trace is exact for the `num_speculative_tokens` it was computed with: the best-score choice depends on that
cap, so replaying with a smaller engine k truncates this chain rather than re-choosing it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from traces.bundle import DrafterSpec, DrafterTrace, TraceBundle


@dataclass(frozen=True)
class SuffixConfig:
    """vLLM's suffix-decoding settings (SpeculativeConfig.suffix_decoding_* and num_speculative_tokens)."""

    max_tree_depth: int = 24
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1
    max_cached_requests: int = 10000
    num_speculative_tokens: int | None = None  # None: vLLM's default, the tree depth

    def __post_init__(self) -> None:
        if self.max_tree_depth < 1:
            raise ValueError(f"suffix decoding: max_tree_depth must be >= 1, got {self.max_tree_depth}")
        if not self.max_spec_factor >= 0:
            raise ValueError(f"suffix decoding: max_spec_factor must be >= 0, got {self.max_spec_factor}")
        if not 0 <= self.min_token_prob <= 1:
            raise ValueError(f"suffix decoding: min_token_prob must be in [0, 1], got {self.min_token_prob}")
        if self.max_cached_requests < -1:
            raise ValueError("suffix decoding: max_cached_requests must be -1 (no limit), 0 (no global cache) "
                             f"or more, got {self.max_cached_requests}")
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 1:
            raise ValueError(f"suffix decoding: num_speculative_tokens must be >= 1, got {self.num_speculative_tokens}")

    @property
    def k(self) -> int:
        """The cap on proposed tokens per step."""
        return self.max_tree_depth if self.num_speculative_tokens is None else self.num_speculative_tokens

    def params(self) -> dict:
        """The settings as a bundle's drafter params (vLLM's names)."""
        return {"num_speculative_tokens": self.k, "suffix_decoding_max_tree_depth": self.max_tree_depth,
                "suffix_decoding_max_spec_factor": self.max_spec_factor,
                "suffix_decoding_min_token_prob": self.min_token_prob,
                "suffix_decoding_max_cached_requests": self.max_cached_requests}


@dataclass
class Draft:
    """One proposal: its tokens, score (sum of float32 probabilities) and the match length that produced it."""

    token_ids: list[int] = field(default_factory=list)
    score: np.float32 = np.float32(0.0)
    match_len: int = 0


class SubstringCounts:
    """Occurrence counts of every substring of length <= depth over a set of sequences (a suffix tree's node
    counts), and per string its next tokens in the tree's sibling order: sorted by count, and among equal counts
    in the order ArcticInference's count updates leave them (`_increment_count` / `_decrement_count` in
    suffix_tree.cc); the proposer takes the first. Sequences can be appended to and removed (eviction)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.count: dict[tuple, int] = {}
        self.children: dict[tuple, list[int]] = {}  # string -> next tokens, head first
        self._seqs: dict[int, list[int]] = {}

    def _increment(self, ctx: tuple, tok: int) -> None:
        """One more occurrence of ctx + tok: a new child goes last; a child whose count reaches its previous
        sibling's count + 1 or stays in a run of equal counts moves before the head of that sibling's run."""
        s = ctx + (tok,)
        c = self.count.get(s, 0)
        kids = self.children.setdefault(ctx, [])
        if c == 0:
            kids.append(tok)
        else:
            i = kids.index(tok)
            if i > 0 and self.count[ctx + (kids[i - 1],)] <= c + 1:
                prev = self.count[ctx + (kids[i - 1],)]
                j = i - 1
                while j > 0 and self.count[ctx + (kids[j - 1],)] == prev:
                    j -= 1
                kids.insert(j, kids.pop(i))
        self.count[s] = c + 1

    def _decrement(self, ctx: tuple, tok: int) -> None:
        """One occurrence fewer: a child at count 0 leaves; one that drops below a sibling of its old count moves
        just after the last of them."""
        s = ctx + (tok,)
        c = self.count[s]
        kids = self.children[ctx]
        i = kids.index(tok)
        if c == 1:
            kids.pop(i)
            del self.count[s]
            if not kids:
                del self.children[ctx]
            return
        if i + 1 < len(kids) and self.count[ctx + (kids[i + 1],)] == c:
            kids.pop(i)
            j = i
            while j < len(kids) and self.count[ctx + (kids[j],)] == c:
                j += 1
            kids.insert(j, tok)
        self.count[s] = c - 1

    def append(self, seq_id: int, token: int) -> None:
        """Add `token` at the end of sequence seq_id: every substring ending there gains one occurrence."""
        seq = self._seqs.setdefault(seq_id, [])
        seq.append(int(token))
        end = len(seq)
        for n in range(min(self.depth, end), 0, -1):  # the tree's order: the oldest active suffix first
            self._increment(tuple(seq[end - n:end - 1]), seq[-1])

    def extend(self, seq_id: int, tokens: Sequence[int]) -> None:
        for t in tokens:
            self.append(seq_id, t)

    def remove(self, seq_id: int) -> None:
        """Forget sequence seq_id (eviction from the global cache), suffix by suffix from its start, each walked
        down from the root, as SuffixTree::remove does."""
        seq = self._seqs.pop(seq_id)
        for start in range(len(seq)):
            for n in range(1, min(self.depth, len(seq) - start) + 1):
                self._decrement(tuple(seq[start:start + n - 1]), seq[start + n - 1])

    def add_sequence(self, seq_id: int) -> None:
        """Register an empty sequence (a global-cache slot taken at request start)."""
        self._seqs.setdefault(seq_id, [])

    def speculate(self, pattern: Sequence[int], max_spec_tokens: int, max_spec_factor: float,
                  min_token_prob: float) -> Draft:
        """The best greedy-path proposal over match lengths 1 .. len(pattern) - 1 (ArcticInference's rule)."""
        pattern = tuple(int(t) for t in pattern[-self.depth:])
        best = Draft()
        min_p = np.float32(min_token_prob)
        for m in range(1, len(pattern)):
            ctx = pattern[len(pattern) - m:]
            if self.count.get(ctx, 0) == 0:
                break
            # the C++ multiplies in float32 and adds 1e-6 in double
            max_tokens = max(0, min(max_spec_tokens, int(float(np.float32(m) * np.float32(max_spec_factor)) + 1e-6)))
            draft = Draft()
            prob = np.float32(1.0)
            cur = ctx
            while len(draft.token_ids) < max_tokens:
                kids = self.children.get(cur) if len(cur) < self.depth else None
                if not kids:
                    break
                tok = kids[0]
                c = self.count[cur + (tok,)]
                prob = np.float32(prob * (np.float32(c) / np.float32(self.count[cur])))
                if prob < min_p:
                    break
                draft.token_ids.append(tok)
                draft.score = np.float32(draft.score + prob)
                cur = cur + (tok,)
            if draft.score >= best.score:
                best = draft
                best.match_len = m
        return best


class SuffixDecodingCache:
    """The per-request local counts and the global response counts, driven like vLLM's proposer."""

    def __init__(self, cfg: SuffixConfig) -> None:
        self.cfg = cfg
        self.global_counts = SubstringCounts(cfg.max_tree_depth)
        self.cached: dict[int, None] = {}  # seq ids in the global cache, oldest first
        self._local: dict[int, SubstringCounts] = {}

    def start_request(self, seq_id: int, prompt: Sequence[int]) -> None:
        local = SubstringCounts(self.cfg.max_tree_depth)
        local.extend(0, prompt)
        self._local[seq_id] = local
        if self.cfg.max_cached_requests != 0:
            self.global_counts.add_sequence(seq_id)
            self.cached[seq_id] = None
            while self.cfg.max_cached_requests > 0 and len(self.cached) > self.cfg.max_cached_requests:
                oldest = next(iter(self.cached))
                del self.cached[oldest]
                self.global_counts.remove(oldest)

    def add_active_response(self, seq_id: int, tokens: Sequence[int]) -> None:
        self._local[seq_id].extend(0, tokens)
        if seq_id in self.cached:
            self.global_counts.extend(seq_id, tokens)

    def stop_request(self, seq_id: int) -> None:
        del self._local[seq_id]

    def speculate(self, seq_id: int, pattern: Sequence[int]) -> Draft:
        c = self.cfg
        result = self._local[seq_id].speculate(pattern, c.k, c.max_spec_factor, c.min_token_prob)
        other = self.global_counts.speculate(pattern, c.k, c.max_spec_factor, c.min_token_prob)
        return other if other.score > result.score else result


def _accepted(draft: Sequence[int], actual: Sequence[int]) -> int:
    """Greedy verification: leading draft tokens equal to the target's continuation."""
    n = 0
    for d, a in zip(draft, actual):
        if d != a:
            break
        n += 1
    return n


def suffix_decoding_traces(requests: Sequence[tuple[Sequence[int], Sequence[int]]],
                           cfg: SuffixConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """(acc_len, proposal_len) per request, for (prompt ids, output ids) in the order they run (each finished
    before the next starts). At output position p the context is prompt + output[:p]."""
    cache = SuffixDecodingCache(cfg)
    out = []
    for i, (prompt, output) in enumerate(requests):
        prompt, output = [int(t) for t in prompt], [int(t) for t in output]
        cache.start_request(i, prompt)
        ctx = list(prompt)
        acc = np.ones(len(output), dtype=np.int32)
        prop = np.zeros(len(output), dtype=np.int32)
        for p, tok in enumerate(output):
            draft = cache.speculate(i, ctx[-cfg.max_tree_depth:])
            prop[p] = len(draft.token_ids)
            acc[p] = 1 + _accepted(draft.token_ids, output[p:])
            cache.add_active_response(i, [tok])
            ctx.append(tok)
        cache.stop_request(i)
        out.append((acc, prop))
    return out


def with_suffix_decoding(bundle: TraceBundle, cfg: SuffixConfig, name: str = "suffix",
                         cost_model: str = "suffix") -> TraceBundle:
    """The bundle with a drafter `name` of kind `suffix` whose traces this pass computes from the token ids,
    requests taken in arrival order (bundle order where arrival_time is absent)."""
    if name in bundle.meta.drafters:
        raise ValueError(f"the bundle already has a drafter named {name!r}; choose another --name")
    for r in bundle.requests:
        if r.prompt_token_ids is None or r.output_token_ids is None:
            raise ValueError(f"request {r.id!r} has no token ids; suffix decoding needs prompt_token_ids and "
                             "output_token_ids")
    order = sorted(range(len(bundle.requests)), key=lambda i: (bundle.requests[i].arrival_time or 0.0, i))
    traces = suffix_decoding_traces(
        [(bundle.requests[i].prompt_token_ids, bundle.requests[i].output_token_ids) for i in order], cfg)
    by_index = dict(zip(order, traces))
    reqs = []
    for i, r in enumerate(bundle.requests):
        acc, prop = by_index[i]
        reqs.append(type(r)(**{**r.__dict__, "drafters": {**r.drafters, name: DrafterTrace(acc, None, prop)}}))
    meta = copy.deepcopy(bundle.meta)
    meta.drafters[name] = DrafterSpec(name, "suffix", cost_model, cfg.params())
    meta.source = {**meta.source, f"{name}_traces": "suffix decoding replayed offline (traces/suffix_decoding.py): "
                   "arrival order, each request finished before the next starts"}
    return TraceBundle(meta, reqs)
