"""MTP as vLLM runs it: the head's layers (n_predict = config.json num_nextn_predict_layers) draft in turn, and a
k above n_predict reuses them.

vLLM (vllm/config/speculative.py): `num_speculative_tokens` defaults to n_predict; a larger k must be a multiple of
n_predict (else "num_speculative_tokens:{k} must be divisible by n_predict={n}"), and any k > 1 warns that it "will
run multiple times of forward on same MTP layer, which may result in lower acceptance rate". The MTP models pick
layer `spec_step_idx % num_mtp_layers` for draft step i (vllm/model_executor/models/deepseek_mtp.py), so draft i is
a forward of layer i mod n_predict fed the previous draft's hidden state: k forwards of the head per step, priced
as the head's own forward each (`TARGET:mtp` in the catalog, traces/catalog.py).

Acceptance: vLLM reports it per position (`vllm:spec_decode_num_accepted_tokens_per_pos`), so an MTP drafter's
acceptance is a per_position level (traces/acceptance_levels.py) measured at the served k. Positions past the k it
was measured at (a head measured at its default k = n_predict, run at a reused k) are the stated extrapolation of
that module, labelled as such; the drop vLLM warns about is in the measured positions only.
"""
from __future__ import annotations

from typing import Any


def check_mtp_k(k: int, n_predict: int, where: str = "k") -> None:
    """vLLM's rule for an MTP drafter's k: k <= n_predict, or a multiple of it (the layers are reused in turn)."""
    if n_predict < 1:
        raise ValueError(f"{where}: n_predict must be >= 1 (the head's num_nextn_predict_layers), got {n_predict}")
    if k < 1:
        raise ValueError(f"{where}: k must be >= 1, got {k}")
    if k > n_predict and k % n_predict:
        raise ValueError(f"{where}: num_speculative_tokens:{k} must be divisible by n_predict={n_predict} "
                         f"(vLLM reuses the {n_predict} MTP layers in turn)")


def layer_schedule(k: int, n_predict: int) -> list[int]:
    """Which MTP layer drafts each of the k positions: i mod n_predict (vLLM's spec_step_idx % num_mtp_layers)."""
    check_mtp_k(k, n_predict)
    return [i % n_predict for i in range(k)]


def reuses_head(k: int, n_predict: int) -> bool:
    """Whether a run at k runs some MTP layer more than once per step (vLLM warns: lower acceptance)."""
    return k > n_predict


def mtp_draft_cost(target: str, gpu: str, tp: int = 1) -> dict[str, Any]:
    """The `drafters:` entry of an MTP drafter: k forwards of the head per step (one token per sequence each),
    each priced by the roofline of the head's parameters on the target's GPUs."""
    from traces.catalog import MTP_SUFFIX, get_model

    head = get_model(target + MTP_SUFFIX)  # fails for a model without an MTP head
    return {"kind": "autoregressive", "profile": {"kind": "roofline", "model": head.name, "gpu": gpu, "tp": tp}}


__all__ = ["check_mtp_k", "layer_schedule", "reuses_head", "mtp_draft_cost"]
