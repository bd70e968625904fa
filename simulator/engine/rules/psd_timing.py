"""PSD's step time (MineDraft's two devices): the target verifies one side while the drafter drafts the other, then
both sync (docs/architecture.md)."""
from __future__ import annotations


def psd_step_time(pre_draft_t, verify_t, draft_t, drafter_prefill_t, overhead, sync_s, target_busy, any_decoding):
    """Both devices start with the drafts of newly joined verify-side requests (`pre_draft_t`); the target then
    verifies (`verify_t`, plus the step overhead when it verifies or prefills: `target_busy`), the drafter drafts the
    other side and runs the drafters' prompt pass; the sync follows the later of the two when any request decodes.
    Returns (target_end, drafter_end, both_done, duration); a step with nothing to time lasts the overhead."""
    target_end = pre_draft_t + verify_t + (overhead if target_busy else 0.0)
    drafter_end = pre_draft_t + draft_t + drafter_prefill_t
    both_done = max(target_end, drafter_end)
    duration = both_done + (sync_s if any_decoding else 0.0)
    if duration <= 0:
        duration = overhead
    return target_end, drafter_end, both_done, duration
