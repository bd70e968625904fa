"""Draft costs on the candidate's GPU: a drafter profile measured on another GPU is scaled to the candidate's GPU by
the roofline ratio of the two GPUs' datasheets (DRAFT_TRANSFER_RULE, stated in plan.json and the assumptions), or
refused (`candidates.draft_transfer: refuse`); never reused unchanged off the GPU it was measured on."""
from __future__ import annotations

import re
from typing import Any

DRAFT_TRANSFER_RULE = ("a drafter profile measured on GPU A and priced on GPU B has its linear terms scaled by the "
                       "roofline ratio of the two datasheets: const, kv_tokens and num_seqs (weight and KV reads: "
                       "memory-bound) by bandwidth(A) / bandwidth(B), batched_tokens (per-token compute) by bf16 "
                       "FLOPs(A) / FLOPs(B); a host-side profile (device: host / CPU) is the same on every GPU")
MEMORY_TERMS = ("const", "kv_tokens", "num_seqs")


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().replace("nvidia", ""))


def gpu_of_device(device: str | None) -> str | None:
    """The catalog GPU a profile's provenance device names ('NVIDIA H100 80GB' -> 'h100-80gb'), 'host' for a
    host CPU, None when it names neither."""
    from traces.catalog import builtin_gpus

    if not device:
        return None
    if re.search(r"\b(host|cpu)\b", device.lower()):
        return "host"
    want = _norm(device)
    return next((name for name in builtin_gpus() if _norm(name) == want), None)


def roofline_scale(coefficients: dict[str, float], measured_on: str, priced_on: str) -> dict[str, float]:
    """DRAFT_TRANSFER_RULE on a linear profile's coefficients."""
    from traces.catalog import get_gpu

    a, b = get_gpu(measured_on), get_gpu(priced_on)
    memory, compute = a.bandwidth_gbps / b.bandwidth_gbps, a.bf16_tflops / b.bf16_tflops
    return {t: float(v) * (memory if t in MEMORY_TERMS else compute) for t, v in coefficients.items()}


def drafter_on_gpu(name: str, spec: dict[str, Any], gpu: str, transfer: str, where: str
                   ) -> tuple[dict[str, Any], str | None]:
    """(the drafter's cost spec priced on `gpu`, a note when it was scaled); ValueError when it cannot be."""
    from simulator.costs.latency import LinearProfile, profile_from_dict, resolve_profile

    prof = spec.get("profile")
    if prof is None or (isinstance(prof, dict) and prof.get("kind") == "roofline"):
        return spec, None  # no profile (constant, fraction_of_verify) or a roofline already on this GPU
    try:
        profile = resolve_profile(prof) if isinstance(prof, str) else profile_from_dict(prof, f"{where}.profile")
    except (ValueError, OSError) as e:
        raise ValueError(f"{where}.profile: {e}") from None
    device = profile.provenance.device
    measured_on = gpu_of_device(device)
    if measured_on == "host":
        return spec, None
    if measured_on is None:
        raise ValueError(f"{where}.profile: {getattr(profile, 'name', prof)!r} does not say which GPU it was measured "
                         f"on (provenance.device {device!r}, expected a catalog GPU or 'host CPU'); a plan cannot "
                         f"price it on {gpu} (give provenance.device, or a roofline profile of the drafter model)")
    if measured_on == gpu:
        return spec, None
    if transfer == "refuse":
        raise ValueError(f"{where}.profile: {profile.name!r} was measured on {measured_on}, not {gpu}; "
                         "candidates.draft_transfer is 'refuse' (set it to 'roofline' to scale it, or give a "
                         f"profile measured on {gpu})")
    if not isinstance(profile, LinearProfile):
        raise ValueError(f"{where}.profile: {profile.name!r} (measured on {measured_on}) is a {profile.kind} "
                         f"profile; only linear profiles can be scaled to {gpu} (DRAFT_TRANSFER_RULE)")
    prov = {k: v for k, v in vars(profile.provenance).items() if v not in (None, "", {})}
    prov.update(device=f"{gpu} (roofline-scaled from {measured_on})",
                notes=f"{profile.name} scaled from {measured_on} to {gpu}: {DRAFT_TRANSFER_RULE}")
    scaled = {"kind": "linear", "name": f"{profile.name}@{gpu}",
              "coefficients": roofline_scale(profile.coefficients, measured_on, gpu), "provenance": prov}
    if profile.model:
        scaled["model"] = profile.model
    note = f"drafter {name}: {profile.name} measured on {measured_on}, roofline-scaled to {gpu}"
    return {**spec, "profile": scaled}, note
