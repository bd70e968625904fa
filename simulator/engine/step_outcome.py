"""Applying a finished step: emitted tokens (the replay rule's end-of-output cut), prefill progress,
policy feedback, the step record and finishes."""
from __future__ import annotations

import numpy as np

from policies.base import NO_DRAFT
from simulator.engine.pricing import masked
from simulator.engine.records import STEP_COLUMNS, ColumnBuffer
from simulator.engine.request_state import FINISHED
from simulator.engine.step import Step


class StepOutcome:
    """Writes a step's effects into the server's state; one instance per server."""

    def __init__(self, server):
        self.srv = server
        self.itl_chunks: list[np.ndarray] = []
        self.steps = ColumnBuffer(STEP_COLUMNS)
        self.step_no = 0
        self.tracks_drafter = server.pricing.switch_cost_s > 0

    def apply(self, s: Step, end: float) -> None:
        srv = self.srv
        st, wl, drafting = srv.state, srv.wl, srv.drafting
        dec = s.decoding
        done_dec = dec[:0]
        emitted_sum = 0
        if len(dec):
            gen = st.gen[dec]
            out = wl.output_len[dec]
            # accepted drafts (traces.acceptance.accepted_drafts) + the corrected/bonus token, cut at the output's end
            grp = drafting.groups_of(s.drafter_idx)
            left = out - gen
            emitted = np.minimum(1 + s.accepted, left) if grp else np.minimum(1, left)
            emitted_sum = int(emitted.sum())
            self.itl_chunks.append(end - st.last_emit[dec])  # every decoding request emitted before
            st.last_emit[dec] = end
            new_gen = gen + emitted
            st.gen[dec] = new_gen
            done_dec = dec[new_gen >= out]
            # accepted as verification reports it, before the max-tokens cut; nothing drafted without a drafter
            st.verify_counts.add(dec, s.proposed if grp else None, s.accepted if grp else None)
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
        policy = drafting.policy
        for i, c in zip(s.prefilled, s.prefill_chunk):
            st.prefill_left[i] -= c
            st.prefill_done[i] += c
            if st.prefill_left[i] == 0:
                del st.prefilling[i]
                first_tokens += 1
                st.gen[i] += 1
                st.last_emit[i] = end
                if np.isnan(st.first_token[i]):
                    st.first_token[i] = end
                if not st.started[i]:
                    st.started[i] = True
                    policy.start_request(wl.request_ids[i])
        self._record(s, emitted_sum + first_tokens)
        done = done_dec
        if len(s.prefilled):  # a prefill can finish a request whose output is one token
            pre = s.prefilled
            fin = pre[(st.gen[pre] >= wl.output_len[pre]) & (st.prefill_left[pre] == 0)]
            if len(fin):
                done = np.concatenate([done_dec, fin])
        self.finish(done, end)
        self.step_no += 1

    def finish(self, done: np.ndarray, end: float) -> None:
        """Requests `done` finished at `end`: free their KV, tell the policy and the arrival source."""
        srv = self.srv
        st, wl, policy = srv.state, srv.wl, srv.drafting.policy
        for i in done:
            i = int(i)
            if st.status[i] == FINISHED:
                continue
            srv.sched.finish(i, end)
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
