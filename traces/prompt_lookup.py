"""Server-visible prompt-lookup (n-gram) match lengths, recomputed from a request's token ids.

At output position p the server holds prompt + output[0..p-1] and would draft output[p] onwards (the
position convention of acc_len, see traces/acceptance.py). Prompt lookup takes the last n tokens
(n from `max_n` down to `min_n`), finds their earliest earlier occurrence in that context, and can
propose the tokens that followed it: `proposal_len[p]` = how many there are (capped by `k_cap`
when given), 0 when no n-gram matches. This is what a combination policy may read before drafting.
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from traces.bundle import DrafterTrace, TraceBundle


def prompt_lookup_lengths(prompt_ids: Sequence[int], output_ids: Sequence[int], *, min_n: int = 2,
                          max_n: int = 4, k_cap: int | None = None) -> np.ndarray:
    """proposal_len per output position (int32, len(output_ids)); 0 = no match."""
    if not 1 <= min_n <= max_n:
        raise ValueError(f"prompt lookup: need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
    if k_cap is not None and k_cap < 1:
        raise ValueError(f"prompt lookup: k_cap must be >= 1, got {k_cap}")
    ctx: list[int] = list(prompt_ids)
    first: list[dict[tuple, int]] = [dict() for _ in range(max_n + 1)]  # n -> n-gram -> earliest start
    indexed_to = 0  # n-grams ending before this index are in `first`

    def index_until(end: int) -> None:
        nonlocal indexed_to
        for e in range(indexed_to, end):  # n-gram ending at e (exclusive end e + 1)
            for n in range(min_n, max_n + 1):
                s = e + 1 - n
                if s >= 0:
                    first[n].setdefault(tuple(ctx[s:e + 1]), s)
        indexed_to = max(indexed_to, end)

    out = np.zeros(len(output_ids), dtype=np.int32)
    for p, tok in enumerate(output_ids):
        L = len(ctx)  # ctx = prompt + output[:p]: the proposal would start at output token p
        index_until(L - 1)  # every n-gram that ends before the current last token
        for n in range(max_n, min_n - 1, -1):
            if L < n:
                continue
            s = first[n].get(tuple(ctx[L - n:]))
            if s is not None:
                avail = L - (s + n)
                out[p] = avail if k_cap is None else min(k_cap, avail)
                break
        ctx.append(int(tok))
    return out


def with_prompt_lookup(bundle: TraceBundle, min_n: int, max_n: int, ngram: str = "ngram") -> TraceBundle:
    """The bundle with the n-gram drafter's proposal_len set to the prompt-lookup match length."""
    reqs = []
    for r in bundle.requests:
        if r.prompt_token_ids is None or r.output_token_ids is None:
            raise ValueError(f"request {r.id!r} has no token ids; prompt lookup needs them")
        t = r.drafters[ngram]
        prop = prompt_lookup_lengths(r.prompt_token_ids, r.output_token_ids, min_n=min_n, max_n=max_n)
        drafters = dict(r.drafters)
        drafters[ngram] = DrafterTrace(t.acc_len, t.tv, prop)
        reqs.append(type(r)(**{**r.__dict__, "drafters": drafters}))
    meta = copy.deepcopy(bundle.meta)
    meta.source = {**meta.source, "ngram_proposal_len": f"prompt lookup, n in [{min_n}, {max_n}], earliest match"}
    return TraceBundle(meta, reqs)
