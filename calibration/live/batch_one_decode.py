"""One request served for real at batch 1: prefill, then AR or SD steps chosen by a `Policy` object.

The target and each model drafter keep their own KV cache (cropped back after a rejection), so a
step costs what a server step costs: the target verifies `[last token] + proposal` in one forward,
a model drafter runs k one-token forwards, the n-gram drafter looks up its match. Greedy
verification with EOS forbidden for the whole output (every request emits exactly
`max_new_tokens`, as the simulator replays it). The policy sees only what a server sees (position,
batch size 1, n-gram match lengths) and gets real `Feedback` after every verify (accepted counts,
TV over the proposed positions for model drafters), so learning policies run unchanged.
"""
from __future__ import annotations

import time
from typing import Any

from calibration.models.drafters import LookupDrafter, ModelDrafter
from calibration.live.records import LiveRequest, LiveStep, match_len, tv_distances
from policies.base import Feedback, Policy, RequestView


class _Cached:
    """A causal LM with its KV cache over a prefix of the committed sequence."""

    def __init__(self, model: Any, eos: list[int]):
        from transformers import DynamicCache

        self.model = model
        self.eos = eos
        self.cache = DynamicCache(config=model.config)
        self.length = 0

    def forward(self, ids: list[int], keep: int = 0):
        """Logits (float32) of the last `keep` of `ids` (0: all) appended to the cached prefix; EOS forbidden."""
        import torch

        with torch.inference_mode():
            out = self.model(input_ids=torch.tensor([ids], dtype=torch.long), cache=self.cache, use_cache=True,
                             logits_to_keep=keep)
            logits = out.logits[0].float().clone()
            if self.eos:
                logits[:, self.eos] = float("-inf")
        self.length += len(ids)
        return logits

    def truncate(self, length: int) -> None:
        """Drop cached tokens beyond `length` (a rejected proposal)."""
        if length < self.length:
            self.cache.crop(length - self.length)
            self.length = length


def serve_request(request_id: str, prompt: list[int], *, target: Any, drafters: dict[str, ModelDrafter | LookupDrafter],
                  policy: Policy | None, max_new_tokens: int, eos: list[int]) -> LiveRequest:
    """Serve one request for real; policy None means plain autoregressive decoding."""
    t_start = time.perf_counter()
    tgt = _Cached(target, eos)
    logits = tgt.forward(prompt, keep=1)
    out = [int(logits[-1].argmax())]
    t_prefill = time.perf_counter()
    models = {name: _Cached(d.model, eos) for name, d in drafters.items()
              if isinstance(d, ModelDrafter) and policy is not None}
    for m in models.values():  # the drafters' prompt pass, before the first output token is returned
        m.forward(prompt, keep=1)
    t_first = time.perf_counter()
    req = LiveRequest(request_id, len(prompt), out, ttft_s=t_first - t_start, e2e_s=0.0,
                      prefill_s=t_prefill - t_start, drafter_prefill_s=t_first - t_prefill, start=t_start)
    if policy is not None:
        policy.start_request(request_id)
    while len(out) < max_new_tokens:
        req.steps.append(_step(request_id, prompt, out, tgt, drafters, models, policy, max_new_tokens))
    if policy is not None:
        policy.finish_request(request_id)
    req.e2e_s = time.perf_counter() - t_start
    return req


def _step(request_id, prompt, out, tgt: _Cached, drafters, models, policy, max_new_tokens) -> LiveStep:
    """Draft (as the policy chooses), verify, emit; appends the emitted tokens to `out`."""
    p = len(out)
    ctx = prompt + out
    drafter, k = None, 0
    t0 = time.perf_counter()
    if policy is not None:
        lookups = {n: d for n, d in drafters.items() if isinstance(d, LookupDrafter)}
        known = {n: match_len(d, ctx) for n, d in lookups.items()}
        choice = policy.choose(RequestView(request_id=request_id, position=p - 1, batch_size=1, proposal_len=known))
        if choice.drafter is not None and choice.k > 0:
            if choice.drafter not in drafters:
                raise ValueError(f"policy {policy.name!r} chose drafter {choice.drafter!r}, which is not loaded "
                                 f"(have {sorted(drafters)}); add it to --drafters")
            drafter, k = choice.drafter, int(choice.k)
    props: list[int] = []
    q_rows = []
    if drafter is not None:
        d = drafters[drafter]
        if isinstance(d, LookupDrafter):
            props = d.ngram.propose(ctx, k)
        else:
            m = models[drafter]
            feed = ctx[m.length:]
            for _ in range(k):
                row = m.forward(feed, keep=1)[-1]
                q_rows.append(row)
                props.append(int(row.argmax()))
                feed = [props[-1]]
    t1 = time.perf_counter()
    verdict_logits = tgt.forward([ctx[-1]] + props)
    verdict = verdict_logits.argmax(-1).tolist()
    acc = next((j for j in range(len(props)) if props[j] != verdict[j]), len(props))
    emitted = (props[:acc] + [verdict[acc]])[: max_new_tokens - p]
    tgt.truncate(len(ctx) + acc)  # keeps last token + accepted proposals; the bonus token is fed next step
    if drafter in models:  # the drafter cached ctx + props[:-1]; keep what was accepted
        models[drafter].truncate(len(ctx) + min(acc, len(props) - 1))
    t2 = time.perf_counter()
    out += emitted
    if policy is not None and drafter is not None and policy.learns:
        tv = tv_distances(verdict_logits[: len(props)], q_rows) if q_rows else None
        policy.observe(Feedback(request_id=request_id, position=p - 1, drafter=drafter, k=k, proposed=len(props),
                                accepted=acc, tv=tv, step_time=t2 - t0, batch_size=1))
    return LiveStep(position=p, drafter=drafter, k=k, proposed=len(props), accepted=acc, emitted=len(emitted),
                    context_len=len(ctx), draft_s=t1 - t0, verify_s=t2 - t1)
