"""Applying a finished step: emitted tokens (the replay rule's end-of-output cut), prefill progress,
policy feedback, the step record and finishes.

The arithmetic is the engine's rules, run by both paths (compiled once in compiled_kernel.py): emission and prompt
progress (simulator/engine/rules/emission.py) here, finishes through Scheduler.finish (rules/finish.py). This module
keeps the Python side: policy and arrival-source calls and the step record."""
from __future__ import annotations

import numpy as np

from policies.base import NO_DRAFT
from simulator.engine.pricing import masked
from simulator.engine.records import STEP_COLUMNS, ColumnBuffer
from simulator.engine.step import Step


class StepOutcome:
    """Writes a step's effects into the server's state; one instance per server."""

    def __init__(self, server):
        from simulator.engine import compiled_kernel as compiled  # the step rules, compiled (imports numba)

        self.srv = server
        self.itl_chunks: list[np.ndarray] = []
        self.steps = ColumnBuffer(STEP_COLUMNS)
        self.step_no = 0
        self.tracks_drafter = server.pricing.switch_cost_s > 0
        self._emit_decoded, self._advance_prefills = compiled.emit_decoded, compiled.advance_prefills

    def apply(self, s: Step, end: float) -> None:
        srv = self.srv
        st, wl, drafting = srv.state, srv.wl, srv.drafting
        dec, pre = s.decoding, s.prefilled
        done = np.empty(len(dec) + len(pre), dtype=np.int64)
        n_done = 0
        emitted_sum = 0
        if len(dec):
            gen = st.gen[dec]  # before this step's tokens: the policy's feedback reads the positions drafted at
            gap = np.empty(len(dec))
            counts = st.verify_counts
            emitted_sum, _, n_done = self._emit_decoded(
                dec, len(dec), s.accepted, s.proposed, end, wl.output_len, st.gen, st.last_emit, gap, 0, counts.steps,
                counts.proposed, counts.accepted, done, 0)
            self.itl_chunks.append(gap)  # every decoding request emitted before
            grp = drafting.groups_of(s.drafter_idx)
            n_drafted = 0
            for di, mask in grp:
                c = len(dec) if mask is None else int(np.count_nonzero(mask))
                st.usage[di] += c
                n_drafted += c
            st.usage[-1] += len(dec) - n_drafted
            if n_drafted and (self.tracks_drafter or drafting.learns):
                drafted = None if n_drafted == len(dec) else s.drafter_idx != NO_DRAFT
                if self.tracks_drafter:  # only the switching cost reads it
                    st.last_drafter[masked(dec, drafted)] = masked(s.drafter_idx, drafted)
                if drafting.learns:
                    drafting.feedback(masked(dec, drafted), masked(gen, drafted), masked(s.drafter_idx, drafted),
                                      masked(s.k, drafted), masked(s.proposed, drafted), masked(s.accepted, drafted),
                                      s.duration)
        srv.executor.after(s)
        first_tokens = 0
        if len(pre):
            first_tokens, n_done = self._advance_prefills(
                pre, s.prefill_chunk, len(pre), st.prefill_left, st.prefill_done, st.gen, st.last_emit,
                st.first_token, end, wl.output_len, done, n_done)
            policy = drafting.policy
            for i in pre[st.prefill_left[pre] == 0].tolist():  # prompts that ended this step
                if not st.started[i]:
                    st.started[i] = True
                    policy.start_request(wl.request_ids[i])
        self._record(s, emitted_sum + first_tokens)
        if n_done:
            self.finish(done[:n_done], end)
        self.step_no += 1

    def finish(self, done: np.ndarray, end: float) -> None:
        """Requests `done` (running, each once) finished at `end`: the scheduler frees their KV, then the policy and
        the arrival source hear of each, in order."""
        srv = self.srv
        st, wl, policy = srv.state, srv.wl, srv.drafting.policy
        srv.sched.finish(done, end)
        for i in done.tolist():
            if st.started[i]:
                policy.finish_request(wl.request_ids[i])
            srv.arrivals.on_finish(i, end)

    def _record(self, s: Step, emitted: int) -> None:
        used_blocks = self.srv.sched.pool.used
        add = self.steps.append_row
        for device, slices in (("target", s.target_slices), ("drafter", s.drafter_slices)):
            for sl in slices:
                add((self.step_no, device, sl.phase, sl.start, sl.end, sl.num_seqs, sl.prefill_tokens,
                     sl.batched_tokens, sl.kv_tokens, used_blocks, sl.proposed_tokens, sl.accepted_tokens,
                     emitted if device == "target" and sl.phase not in ("draft", "draft_prefill", "sync") else 0,
                     sl.sub_batch, sl.drafters))
