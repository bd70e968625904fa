"""Emission: the tokens a step gives each request (decoded or verified tokens, a prompt's first token) and when."""
from __future__ import annotations

import math


def sampling_seqs(n_dec, pre, chunk, n_pre, prefill_left):
    """Requests that sample a token this step: every decode, and each prompt chunk that ends its prompt (its chunk is
    all the prompt left)."""
    n = n_dec
    for j in range(n_pre):
        if chunk[j] == prefill_left[pre[j]]:
            n += 1
    return n


def emit_decoded(dec, n, accepted, proposed, now, out, gen, last_emit, itl, ni, steps, drafted, accepted_sum, done,
                 n_done):
    """Each of dec[:n] emits 1 + accepted[j] tokens at `now`, cut at its output's end, and one ITL gap itl[ni + j];
    its step, proposed and accepted counts grow; one whose output completes joins done. Returns (emitted, ni,
    n_done)."""
    emitted = 0
    for j in range(n):
        i = dec[j]
        e = min(1 + accepted[j], out[i] - gen[i])
        itl[ni] = now - last_emit[i]
        ni += 1
        last_emit[i] = now
        gen[i] += e
        emitted += e
        steps[i] += 1
        drafted[i] += proposed[j]
        accepted_sum[i] += accepted[j]
        if gen[i] >= out[i]:
            done[n_done] = i
            n_done += 1
    return emitted, ni, n_done


def advance_prefills(pre, chunk, n, prefill_left, prefill_done, gen, last_emit, first_token, now, out, done, n_done):
    """Each of pre[:n] processes chunk[j] prompt tokens; one whose prompt ends emits its first output token at `now`
    (its first_token, unless a recompute after preemption) and joins done if that completes its output. Returns
    (first tokens emitted, n_done)."""
    first_tokens = 0
    for j in range(n):
        i = pre[j]
        prefill_left[i] -= chunk[j]
        prefill_done[i] += chunk[j]
        if prefill_left[i] == 0:
            first_tokens += 1
            gen[i] += 1
            last_emit[i] = now
            if math.isnan(first_token[i]):
                first_token[i] = now
            if gen[i] >= out[i]:
                done[n_done] = i
                n_done += 1
    return first_tokens, n_done
