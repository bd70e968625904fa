"""Live batched server on real models: continuous batching, per-sequence KV caches, AR / SD with any Policy.

vLLM-V0-like rules, the ones the simulator runs with `prefill: separate`: FIFO admission while
`max_num_seqs` and the token budget allow; a step that admits requests is a prefill-only step (the
target's prompt pass, then the drafters' own); otherwise every running request decodes (AR) or is
drafted for and verified (SD) in one batched target forward. Arrivals are open loop at given
wall-clock offsets or come from N closed-loop clients (think time 0). Greedy verification with EOS
forbidden, so every request emits exactly `max_new_tokens`; the policy sees what a server sees and
gets real feedback (TV over the proposed positions for model drafters). The two-device PSD loop
(calibration/live/psd_workers.py) reuses this server with the drafting on another process.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calibration.live.batched_kv import BatchedLM, SeqKV
from calibration.live.draft_engine import DraftEngine, DraftItem, Proposal, match_len
from calibration.models.drafters import LookupDrafter
from calibration.live.records import LiveRequest, LiveStep, tv_distances
from policies.base import NO_DRAFT, BatchFeedback, BatchView, Policy


@dataclass(frozen=True)
class ServeConfig:
    """Batching limits and the arrival pattern of one live batched run."""

    max_new_tokens: int = 48
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 4096
    clients: int = 4  # > 0: closed loop with this many clients, think time 0
    arrivals: tuple[float, ...] | None = None  # open loop (clients = 0): wall-clock offsets in seconds

    def __post_init__(self) -> None:
        if self.max_new_tokens < 2 or self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("live batched: max_new_tokens must be >= 2, max_num_seqs and max_num_batched_tokens >= 1")
        if self.clients < 0 or (self.clients == 0 and self.arrivals is None):
            raise ValueError("live batched: give clients > 0 (closed loop) or arrivals (open loop)")


@dataclass
class BatchStepRecord:
    """One server step as it ran: kind, batch, wall-clock phases (seconds from the run's start)."""

    kind: str  # prefill | decode | verify | psd | psd-fallback
    start: float
    end: float
    num_seqs: int
    draft_s: float = 0.0
    verify_s: float = 0.0
    drafted_seqs: int = 0  # PSD: requests drafted on the draft device this step
    proposed: int = 0
    accepted: int = 0
    prompt_tokens: int = 0  # prefill: the prompts' tokens the target read
    rows: tuple[LiveStep, ...] = ()  # decode / verify: what each request verified (its drafter, k, context)


@dataclass
class Running:
    """A request being served: its committed output, target KV cache and (PSD) side and pending proposal."""

    index: int
    req: LiveRequest
    prompt: list[int]
    kv: SeqKV
    out: list[int] = field(default_factory=list)
    sent: int = 0  # committed tokens (prompt + output) already sent to the draft side
    side: int = -1  # PSD sub-batch
    pending: tuple[str, int, Proposal] | None = None  # PSD: (drafter, k, proposal) drafted last step

    @property
    def committed(self) -> list[int]:
        return self.prompt + self.out


class LocalDrafts:
    """The draft side in the target's own process (SD): drafting runs, then verify, on the same device."""

    def __init__(self, engine: DraftEngine):
        self.engine = engine
        self._result: dict[str, Proposal] = {}

    def prefill(self, prompts: dict[str, list[int]], used: tuple[str, ...] | None = None) -> None:
        self.engine.prefill(prompts, used)

    def remove(self, ids: list[str]) -> None:
        self.engine.remove(ids)

    def submit(self, items: list[DraftItem], want_rows: bool) -> None:
        self._result = self.engine.draft(items, want_rows) if items else {}

    def collect(self) -> dict[str, Proposal]:
        out, self._result = self._result, {}
        return out

    def close(self) -> None:
        pass


class BatchedServer:
    """Serves `prompts` under one policy (None: autoregressive) with a target and a draft side."""

    def __init__(self, target: Any, eos: list[int], prompts: list[tuple[str, list[int]]], cfg: ServeConfig,
                 policy: Policy | None, drafts: Any, drafter_names: tuple[str, ...],
                 lookups: dict[str, LookupDrafter], categories: list[str] | None = None):
        self.lm = BatchedLM(target, eos)
        self.prompts, self.cfg, self.policy, self.drafts = prompts, cfg, policy, drafts
        self.drafter_names, self.lookups = drafter_names, lookups
        self.categories = categories or [""] * len(prompts)
        self.capacity = max(len(p) for _, p in prompts) + cfg.max_new_tokens + 64
        self.waiting: deque[int] = deque()
        self.arrival = np.full(len(prompts), np.nan)
        self.running: list[Running] = []
        self.done: dict[int, LiveRequest] = {}
        self.steps: list[BatchStepRecord] = []
        self.next_submit = 0
        self.t0 = 0.0
        self.want_rows = bool(policy is not None and policy.learns)
        self.used = used_drafters(policy, drafter_names)

    # ------------------------------------------------------------ clock and arrivals

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def _submit(self, i: int, t: float) -> None:
        self.arrival[i] = t
        self.waiting.append(i)

    def _arrivals(self) -> None:
        """Open loop: requests whose wall-clock arrival has passed join the queue."""
        arr = self.cfg.arrivals
        if self.cfg.clients == 0:
            while self.next_submit < len(self.prompts) and arr[self.next_submit] <= self.now():
                self._submit(self.next_submit, float(arr[self.next_submit]))
                self.next_submit += 1

    def start(self) -> None:
        self.t0 = time.perf_counter()
        if self.cfg.clients > 0:
            for _ in range(min(self.cfg.clients, len(self.prompts))):
                self._submit(self.next_submit, 0.0)
                self.next_submit += 1

    def idle_wait(self) -> None:
        """Nothing to run: sleep until the next open-loop arrival."""
        if self.cfg.clients == 0 and self.next_submit < len(self.prompts):
            time.sleep(max(0.0, self.cfg.arrivals[self.next_submit] - self.now()))

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.prompts)

    # ------------------------------------------------------------ steps shared by SD and PSD

    def admit(self) -> list[int]:
        """FIFO admission within max_num_seqs and the token budget (the simulator's separate-prefill rule)."""
        budget, picked = self.cfg.max_num_batched_tokens, []
        while self.waiting and len(self.running) + len(picked) < self.cfg.max_num_seqs and budget > 0:
            i = self.waiting[0]
            c = len(self.prompts[i][1])
            if c > budget and picked:
                break
            self.waiting.popleft()
            picked.append(i)
            budget -= c
        return picked

    def prefill(self, picked: list[int], assign_side=None) -> None:
        """A prefill-only step: the target's prompt pass (first token), then the draft side's own."""
        t_start = self.now()
        new = []
        for i in picked:
            rid, prompt = self.prompts[i]
            req = LiveRequest(rid, len(prompt), [], ttft_s=0.0, e2e_s=0.0, prefill_s=0.0, drafter_prefill_s=0.0,
                              start=float(self.arrival[i]))
            new.append(Running(i, req, list(prompt), self.lm.new_seq(self.capacity)))
        rows = self.lm.forward([r.kv for r in new], [r.prompt for r in new], last_only=True)
        t_target = self.now()
        for r, row in zip(new, rows):
            r.out.append(int(row[-1].argmax()))
            r.sent = len(r.prompt)
            self.running.append(r)
            if assign_side is not None:
                assign_side(r)
        if self.policy is not None:
            self.drafts.prefill({r.req.id: r.prompt for r in new}, self.used)
            for r in new:
                self.policy.start_request(r.req.id)
        t_end = self.now()
        for r in new:
            r.req.ttft_s = t_end - r.req.start
            r.req.prefill_s = t_target - t_start
            r.req.drafter_prefill_s = t_end - t_target
        self.steps.append(BatchStepRecord("prefill", t_start, t_end, len(new), draft_s=t_end - t_target,
                                          verify_s=t_target - t_start, prompt_tokens=sum(len(r.prompt) for r in new)))

    def choose(self, rows: list[Running]) -> list[tuple[str | None, int]]:
        """The policy's (drafter, k) per row; (None, 0) for plain decoding."""
        if self.policy is None or not rows:
            return [(None, 0)] * len(rows)
        names = self.drafter_names
        props = {n: np.array([match_len(d, r.committed) for r in rows], dtype=np.int64) for n, d in self.lookups.items()}
        view = BatchView(now=self.now(), drafters=names, request_ids=[r.req.id for r in rows],
                         positions=np.array([len(r.out) for r in rows], dtype=np.int64),
                         categories=[self.categories[r.index] for r in rows], proposal_len=props)
        d_idx, ks = self.policy.choose_batch(view)
        return [(None, 0) if int(d) == NO_DRAFT or int(k) <= 0 else (names[int(d)], int(k)) for d, k in zip(d_idx, ks)]

    def draft_items(self, rows: list[Running], choices) -> list[DraftItem]:
        """Messages for the draft side: committed tokens it has not seen, drafter and k."""
        items = []
        for r, (d, k) in zip(rows, choices):
            if d is None:
                continue
            ctx = r.committed
            items.append(DraftItem(r.req.id, tuple(ctx[r.sent:]), d, k))
            r.sent = len(ctx)
        return items

    def verify(self, rows: list[Running], plan: list[tuple[str | None, int, Proposal | None]],
               t_draft: float, t_verify0: float) -> tuple[LiveStep, ...]:
        """One batched target forward over `rows` ([last token] + proposal each); accept greedily, emit,
        feed the policy back. Returns each row's step record."""
        if not rows:
            return ()
        toks = [[r.out[-1]] + (list(p.tokens) if p is not None else []) for r, (_, _, p) in zip(rows, plan)]
        logits = self.lm.forward([r.kv for r in rows], toks)
        t_end = self.now()
        fb = {"ids": [], "pos": [], "d": [], "k": [], "prop": [], "acc": [], "tv": []}
        done = []
        for r, (d, k, p), lg in zip(rows, plan, logits):
            props = list(p.tokens) if p is not None else []
            verdict = lg.argmax(-1).tolist()
            acc = next((j for j in range(len(props)) if props[j] != verdict[j]), len(props))
            pos = len(r.out)
            ctx_len = len(r.prompt) + pos
            emitted = (props[:acc] + [verdict[acc]])[: self.cfg.max_new_tokens - pos]
            r.kv.truncate(ctx_len + acc)  # keeps last token + accepted proposals; the bonus token is fed next
            r.out += emitted
            r.req.steps.append(LiveStep(position=pos, drafter=d, k=k, proposed=len(props),
                                        accepted=acc, emitted=len(emitted), context_len=ctx_len,
                                        draft_s=t_draft, verify_s=t_end - t_verify0))
            done.append(r.req.steps[-1])
            if d is not None and self.policy is not None and self.policy.learns:
                tv = None
                if p is not None and p.q_rows is not None and len(props):
                    tv = np.array(tv_distances(lg[: len(props)], list(p.q_rows)))
                fb["ids"].append(r.req.id)
                fb["pos"].append(pos)
                fb["d"].append(self.drafter_names.index(d))
                fb["k"].append(k)
                fb["prop"].append(len(props))
                fb["acc"].append(acc)
                fb["tv"].append(tv)
        if fb["ids"]:
            self.policy.observe_batch(BatchFeedback(
                drafters=self.drafter_names, request_ids=fb["ids"], positions=np.array(fb["pos"], dtype=np.int64),
                drafter_idx=np.array(fb["d"], dtype=np.int64), k=np.array(fb["k"], dtype=np.int64),
                proposed=np.array(fb["prop"], dtype=np.int64), accepted=np.array(fb["acc"], dtype=np.int64),
                tv=fb["tv"], step_time=t_end - t_verify0 + t_draft))
        return tuple(done)

    def retire(self) -> None:
        """Requests with all their tokens leave; a closed-loop client sends its next request."""
        t = self.now()
        left = [r for r in self.running if len(r.out) >= self.cfg.max_new_tokens]
        if not left:
            return
        self.running = [r for r in self.running if len(r.out) < self.cfg.max_new_tokens]
        for r in left:
            r.req.output_ids = list(r.out)
            r.req.e2e_s = t - r.req.start
            self.done[r.index] = r.req
            if self.policy is not None:
                self.policy.finish_request(r.req.id)
            if self.cfg.clients > 0 and self.next_submit < len(self.prompts):
                self._submit(self.next_submit, t)
                self.next_submit += 1
        if self.policy is not None:
            self.drafts.remove([r.req.id for r in left])

    # ------------------------------------------------------------ the AR / SD loop

    def sd_step(self) -> None:
        """Draft (as the policy chooses) on the same device, then verify the whole batch."""
        rows = list(self.running)
        t0 = self.now()
        choices = self.choose(rows)
        items = self.draft_items(rows, choices)
        if items:
            self.drafts.submit(items, self.want_rows)
        got = self.drafts.collect() if items else {}
        t1 = self.now()
        plan = [(d, k, got.get(r.req.id)) for r, (d, k) in zip(rows, choices)]
        done = self.verify(rows, plan, t1 - t0, t1)
        self.steps.append(BatchStepRecord("verify" if self.policy is not None else "decode", t0, self.now(),
                                          len(rows), draft_s=t1 - t0, verify_s=self.now() - t1,
                                          drafted_seqs=len(items), proposed=sum(s.proposed for s in done),
                                          accepted=sum(s.accepted for s in done), rows=done))

    def serve(self, step=None) -> list[LiveRequest]:
        """Run until every request has finished; returns them in submission order."""
        step = step or self.sd_step
        self.start()
        while not self.finished:
            self._arrivals()
            picked = self.admit() if self.waiting else []
            if picked:
                self.prefill(picked, getattr(self, "assign_side", None))
            elif self.running:
                step()
            else:
                self.idle_wait()
                continue
            self.retire()
        return [self.done[i] for i in range(len(self.prompts))]


def used_drafters(policy: Policy | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """Drafters a mode runs (and prefills): the policy's `drafters_used()` (the simulator's rule); one without a
    loaded model is an error."""
    if policy is None:
        return ()
    mine = policy.drafters_used()
    missing = [d for d in mine if d not in names]
    if missing:
        raise ValueError(f"policy {policy.name!r} uses drafter(s) {missing}, which are not loaded (have {list(names)})")
    return mine


def poisson_arrivals(n: int, rate: float, seed: int) -> tuple[float, ...]:
    """Open-loop arrival offsets (s) of a Poisson process at `rate` requests/s, from the run's seed."""
    if rate <= 0:
        raise ValueError(f"arrival rate must be > 0 requests/s, got {rate!r}")
    gaps = np.random.default_rng([seed, 7]).exponential(1.0 / rate, size=n)
    return tuple(float(x) for x in np.cumsum(gaps) - gaps[0])
