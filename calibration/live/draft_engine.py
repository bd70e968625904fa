"""The drafting side of a live batched server: model drafters with per-sequence KV caches and n-gram lookup.

It only ever sees the committed tokens of each request (prompt + verified output), sent as deltas, so
the same object runs in the target's process (SD) or in a drafter process on its own device (PSD).
A model drafter's cache is cut back to the longest prefix it shares with the committed tokens before
it drafts again, so rejected proposals never need to be reported to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from calibration.live.batched_kv import BatchedLM, SeqKV
from calibration.models.drafters import LookupDrafter, ModelDrafter
from calibration.live.records import match_len


@dataclass(frozen=True)
class DraftItem:
    """Draft for one request: tokens committed since the last message, then `k` proposals with `drafter`."""

    request_id: str
    new_tokens: tuple[int, ...]
    drafter: str
    k: int


@dataclass
class Proposal:
    """What one request's drafting produced: tokens, and the drafter's logits rows when asked for (TV)."""

    tokens: list[int]
    q_rows: Any = None  # float32 [len(tokens), vocab] for model drafters when rows were asked for


@dataclass
class _Seq:
    committed: list[int]
    cached: dict[str, list[int]] = field(default_factory=dict)  # tokens in each model drafter's cache
    kv: dict[str, SeqKV] = field(default_factory=dict)


class DraftEngine:
    """Drafts for many requests at once: one batched forward per drafter per draft position."""

    def __init__(self, drafters: dict[str, ModelDrafter | LookupDrafter], eos: list[int], capacity: int):
        self.models = {n: BatchedLM(d.model, eos) for n, d in drafters.items() if isinstance(d, ModelDrafter)}
        self.lookups = {n: d for n, d in drafters.items() if isinstance(d, LookupDrafter)}
        self.capacity = capacity
        self.seqs: dict[str, _Seq] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.models) + tuple(self.lookups)

    def prefill(self, prompts: dict[str, list[int]], used: tuple[str, ...] | None = None) -> None:
        """New requests: each model drafter in `used` (None: all) runs its own prompt pass over them, one batch
        per drafter; another drafter catches up on its first draft."""
        ids = list(prompts)
        for rid in ids:
            self.seqs[rid] = _Seq(list(prompts[rid]))
        for name, lm in self.models.items():
            if used is not None and name not in used:
                continue
            kvs = [lm.new_seq(self.capacity) for _ in ids]
            lm.forward(kvs, [prompts[r] for r in ids], last_only=True)
            for rid, kv in zip(ids, kvs):
                self.seqs[rid].kv[name] = kv
                self.seqs[rid].cached[name] = list(prompts[rid])

    def remove(self, request_ids) -> None:
        for rid in request_ids:
            self.seqs.pop(rid, None)

    def commit(self, request_id: str, tokens) -> None:
        self.seqs[request_id].committed.extend(int(t) for t in tokens)

    def draft(self, items: list[DraftItem], want_rows: bool = False) -> dict[str, Proposal]:
        """Proposals per request id (the n-gram drafter may propose fewer than k, even none)."""
        for it in items:
            if it.drafter not in self.models and it.drafter not in self.lookups:
                raise ValueError(f"drafter {it.drafter!r} is not loaded (have {sorted(self.names)})")
            self.commit(it.request_id, it.new_tokens)
        out: dict[str, Proposal] = {}
        for it in items:
            if it.drafter in self.lookups:
                out[it.request_id] = Proposal(self.lookups[it.drafter].ngram.propose(self.seqs[it.request_id].committed,
                                                                                     it.k))
        for name, lm in self.models.items():
            group = [it for it in items if it.drafter == name and it.k > 0]
            if group:
                out.update(self._draft_model(name, lm, group, want_rows))
        return out

    def match_len(self, request_id: str, name: str) -> int:
        """Tokens the n-gram drafter can propose now (0: no match), known before drafting."""
        return match_len(self.lookups[name], self.seqs[request_id].committed)

    def _draft_model(self, name: str, lm: BatchedLM, group: list[DraftItem], want_rows: bool) -> dict[str, Proposal]:
        import torch

        seqs = [self.seqs[it.request_id] for it in group]
        for s in seqs:
            if name not in s.kv:  # not prefilled for this drafter: the first draft feeds the whole context
                s.kv[name], s.cached[name] = lm.new_seq(self.capacity), []
        feeds = []
        for s in seqs:  # cut the cache back to what it shares with the committed tokens, feed the rest
            cached, committed = s.cached[name], s.committed
            n = min(len(cached), len(committed) - 1)
            same = next((j for j in range(n) if cached[j] != committed[j]), n)
            s.kv[name].truncate(same)
            s.cached[name] = committed[:same]
            feeds.append(committed[same:])
        props: list[list[int]] = [[] for _ in group]
        rows: list[list[Any]] = [[] for _ in group]
        active = list(range(len(group)))
        for j in range(max(it.k for it in group)):
            active = [i for i in active if group[i].k > j]
            logits = lm.forward([seqs[i].kv[name] for i in active], [feeds[i] for i in active], last_only=True)
            for i, row in zip(active, logits):
                seqs[i].cached[name] += feeds[i]
                tok = int(row[-1].argmax())
                props[i].append(tok)
                if want_rows:
                    rows[i].append(row[-1])
                feeds[i] = [tok]
        return {it.request_id: Proposal(p, torch.stack(r) if want_rows else None)
                for it, p, r in zip(group, props, rows)}
