"""What a plan's answer rests on, in short lines (measured, borrowed, modelled) and the notes that feed them."""
from __future__ import annotations

from typing import Any

from experiments.plan.config import PlanConfig
from experiments.plan.deploy import VLLM_VERSION, is_mtp_mode
from experiments.plan.candidates import Candidate


def plan_assumptions(plan: PlanConfig, cands: list[Candidate], base: dict[str, Any] | None, notes: list[str]
                 ) -> dict[str, list[str]]:
    """What the answer rests on, in short lines: measured, borrowed, modelled (details: notes, rules)."""
    measured, borrowed, modelled = [], [], []
    for gpu, by_tp in sorted(plan.candidates.profiles.items()):
        for tp, ref in sorted(by_tp.items()):
            measured.append(f"target step times on {gpu} TP {tp}: {ref}")
    drafting = [c for c in cands if c.mode.mode != "ar"]
    for line in sorted({n for c in drafting for n in c.cost_notes if "measured on" in n}):
        measured.append(line)
    if base is not None and drafting:
        traces = base["traces"] if isinstance(base["traces"], str) else "generated traces"
        said = " ".join(n for n in notes if n.startswith("acceptance "))
        borrowed.append(f"acceptance replayed from {traces}"
                        + (", recorded for another target (notes)" if "acceptance borrowed" in said else "")
                        + (", some of it without a recorded target (notes)" if "without a target" in said else ""))
    scaled = sorted({n.split(":")[0] for c in drafting for n in c.cost_notes if "roofline-scaled" in n})
    if scaled:
        borrowed.append(f"{', '.join(scaled)}: a profile measured on one GPU, priced on the others by the datasheet "
                        "roofline ratio (rule draft_transfer)")
    if any("host CPU" in n for c in drafting for n in c.cost_notes):
        borrowed.append("n-gram drafting: a published host-side cost, the same on every GPU")
    roof = sorted({(c.gpu, c.tp) for c in cands if c.target_costs.startswith("roofline")})
    if roof:
        modelled.append(f"target step times of {len(roof)} of {len({(c.gpu, c.tp) for c in cands})} (GPU, TP) pairs: "
                        "roofline model from datasheets, not measured")
    modelled += _scheduling(cands)
    if any(c.mode.mode == "psd" for c in cands):
        modelled.append("PSD: max_num_seqs sequences in all per target replica, split over its two sub-batches")
    modelled += _engine_lines(cands)
    mtp = sorted({c.mode.name for c in drafting if is_mtp_mode(c.mode)})
    if mtp:
        modelled.append(f"MTP ({', '.join(mtp)}): the target's own head drafts k tokens per step, each a forward of "
                        "its layer (reused in turn past n_predict, as vLLM does), its weights and KV placed beside "
                        "the target's; unless the base config prices it, its forward is a roofline (traces/mtp.py)")
    if any(c.deployable and c.deploy.speculative_config
           and "num_speculative_tokens_per_batch_size" in c.deploy.speculative_config for c in cands):
        modelled.append("k by batch size: draftsim's batch is a step's decoding requests; vLLM's every scheduled "
                        "request (prefill chunks included)")
    modelled += [n for n in notes if n.startswith("n-gram acceptance replayed")]
    return {k: v for k, v in (("measured", measured), ("borrowed", borrowed), ("modelled", modelled)) if v}


def _engine_lines(cands: list[Candidate]) -> list[str]:
    """vLLM V1's KV lookahead slots and async scheduling as the simulated servers ran them (one line each)."""
    servers = [c.experiment.server for c in cands]
    if not any(s.scheduler == "vllm-v1" for s in servers):
        return []
    slots = sorted({(c.mode.name, c.kv_lookahead) for c in cands if c.mode.mode == "sd"})
    held = [f"{name} {n}" for name, n in slots if n]
    lines = ["KV lookahead slots per running request (vLLM V1 reserves k for EAGLE/MTP/draft-model proposers, none "
             "for n-gram/suffix): " + (", ".join(held) if held else "none")]
    on = sorted({s.async_scheduling for s in servers})
    if on == [True]:
        lines.append("async scheduling: on (--async-scheduling): each step's host work overlaps the forward before "
                     "it; a step's period is max(forward, host)")
    elif on == [False]:
        lines.append(f"async scheduling: off (--no-async-scheduling; vLLM {VLLM_VERSION} turns it on by default): "
                     "host work between steps adds to each step")
    else:
        lines.append("async scheduling: on for some candidates, off for others (each deploy line says which)")
    return lines


def _scheduling(cands: list[Candidate]) -> list[str]:
    """Which scheduler rules the candidates were simulated under (simulator/engine/scheduler.py SCHEDULERS), one
    line per scheduler; any other than vLLM V1's is flagged, since every deploy line runs vLLM V1."""
    from simulator.engine.scheduler import scheduler_variant

    by: dict[str, list[Candidate]] = {}
    for c in cands:
        by.setdefault(c.experiment.server.scheduler, []).append(c)
    lines = []
    for name, group in sorted(by.items()):
        variant = scheduler_variant(name)
        some = "" if len(group) == len(cands) else f" ({len(group)} of {len(cands)} candidates)"
        chunked = sorted({c.experiment.server.chunked_prefill or variant.always_chunked for c in group})
        line = (f"scheduling simulated: server.scheduler {name}{some}, chunked prefill "
                f"{'/'.join('on' if x else 'off' for x in chunked)}: {variant.description}")
        if name != "vllm-v1":
            line += "; not vLLM V1's rules, which the deploy line runs"
        lines.append(line)
    return lines


def acceptance_note(plan: PlanConfig, base: dict[str, Any]) -> str | None:
    """Names acceptance traces recorded for another target than the one planned for (the rule of
    experiments/provenance.py, as `draftsim run` states it)."""
    from experiments.provenance import acceptance_provenance
    from experiments.run import resolve_bundle

    try:
        meta = resolve_bundle(base["traces"], plan.seed).meta
    except Exception:  # noqa: BLE001  (a bundle that cannot be read fails later with its own error)
        return None
    origins = [acceptance_provenance(meta, plan.candidates.target, d) for d in sorted(meta.drafters)]
    borrowed = [a for a in origins if a.origin == "borrowed"]
    unattributed = [a.drafter for a in origins if a.origin == "unattributed"]
    parts = []
    if borrowed:
        traces = base["traces"] if isinstance(base["traces"], str) else "generated"
        parts.append(f"acceptance borrowed: the traces ({traces}) were recorded for target "
                     f"{borrowed[0].recorded_target}, not {plan.candidates.target}; drafters "
                     f"{[a.drafter for a in borrowed]} keep that acceptance here")
    if unattributed:
        parts.append(f"acceptance given without a target: drafters {unattributed} replay levels that record no "
                     f"target (inline rates), so nothing says they were measured on {plan.candidates.target}")
    return "; ".join(parts) or None
