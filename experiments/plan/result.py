"""plan.json: each candidate's entry, the ranking, the answer and the rules in words."""
from __future__ import annotations

from typing import Any

from experiments.plan.config import PlanConfig
from experiments.plan.crossover import CROSSOVER_RULE
from experiments.plan.deploy import VLLM_RULES, VLLM_VERSION, lookup_note
from experiments.plan.draft_gpu import DRAFT_TRANSFER_RULE
from experiments.plan.bounds import SERVICE_BOUND_RULE, TPOT_FLOOR_RULE
from experiments.plan.early_stop import EARLY_STOP_RULE
from experiments.plan.search import ANSWER_CONFIDENCE_RULE, BATCHES, BELOW_SERVICE, FIRST_SEED_RULE, MAX_UTILIZATION
from experiments.plan.prices import GpuPrice
from experiments.sweep.experiment import json_ready
from simulator.measure.metrics import round_sig
from experiments.plan.assumptions import acceptance_note, plan_assumptions
from experiments.plan.candidates import Candidate, bundle_drafter_specs, concurrent_sequences
from experiments.plan.point import SERVICE_PROBE_RULE
from experiments.plan.search_runs import SCOPE_RULE
from experiments.plan.traffic import CURVE_SIZE_FRACTION, TrafficModel


ROOFLINE_NOTE = ("roofline: target step times from catalog datasheet numbers (traces/data/catalog), not "
                 "measured on that GPU; the absolute capacity is a model (see simulator/costs/roofline.py)")


def _mean(values: list[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round_sig(sum(vals) / len(vals)) if vals else None


def _curve(c: Candidate) -> list[dict[str, Any]]:
    rows = []
    for e in sorted(c.evaluations, key=lambda e: e.rate):
        # a curve point has no verdict: its attainment is its run's
        attainment = _mean([s.get("steady_slo_attainment") for s in e.seeds]) if e.curve_only else e.attainment
        row = {"rate": round_sig(e.rate), "sustainable": e.sustainable, "decided": e.decided,
               "overloaded": e.overloaded, "seeds": len(e.seeds), "attainment": attainment,
               "attainment_interval": e.attainment_interval, "why": e.why}
        stopped = [x["stopped"]["rule"] for x in e.seeds if x.get("stopped")]
        if stopped:  # the figures of a stopped run are those its rule leaves exact; the rest are None
            row["stopped_early"] = stopped
            if "strict fail" in stopped:  # the attainment of the most favourable completion: an upper bound
                row["attainment_at_most"], row["attainment"], row["attainment_interval"] = row["attainment"], None, None
        row.update({f"{m}_mean": _mean([s.get(m) for s in e.seeds]) for m in
                    ("steady_throughput_tok_s", "steady_ttft_p99_s", "steady_tpot_p99_s", "steady_e2e_p99_s",
                     "steady_e2e_mean_s", "steady_tpot_mean_s")})
        rows.append(row)
    return rows


def _vllm_serve(plan: PlanConfig, c: Candidate) -> dict[str, Any] | None:
    """The `vllm serve` command line of a deployable candidate (per replica); None for a research row."""
    from traces.catalog import get_model

    if not c.deployable:
        return None
    server = c.experiment.server
    args = [f"vllm serve {get_model(plan.candidates.target).hf_id}", f"--tensor-parallel-size {c.tp}",
            f"--max-num-seqs {server.max_num_seqs}"]
    if server.max_num_batched_tokens:
        args.append(f"--max-num-batched-tokens {server.max_num_batched_tokens}")
    knobs = plan.candidates.deployment
    if knobs.max_model_len:
        args.append(f"--max-model-len {knobs.max_model_len}")
    if knobs.gpu_memory_utilization:
        args.append(f"--gpu-memory-utilization {knobs.gpu_memory_utilization}")
    # vLLM VLLM_VERSION schedules asynchronously unless told not to: the line states what was simulated
    args.append("--async-scheduling" if server.async_scheduling else "--no-async-scheduling")
    if c.deploy.cli_arg():
        args.append(c.deploy.cli_arg())
    return {"replicas": c.replicas, "vllm_version": VLLM_VERSION, "runs": c.deploy.why, "command": " ".join(args)}


def candidate_result(c: Candidate, target_rate: float, plan: PlanConfig) -> dict[str, Any]:
    """One candidate's entry of plan.json."""
    doc: dict[str, Any] = {
        "id": c.id, "gpu": c.gpu, "tp": c.tp, "replicas": c.replicas, "mode": c.mode.name,
        "scheduler": c.scheduler.server(), "status": c.status, "reason": c.reason or None, "num_gpus": c.num_gpus,
        "draft_gpus": c.mode.draft_gpus * c.replicas, "usd_per_hour": c.usd_per_hour, "target_costs": c.target_costs,
        "cost_notes": c.cost_notes, "placement": c.placement, "comparison": _comparison(c),
        "deploy": c.deploy.to_json() if c.deploy else None,
    }
    if c.status != "ok" or c.search is None:
        return doc
    s = c.search
    final = {v.rate: v for v in s.verdicts}  # verdicts as the search left them (some passes re-judged)
    for e in c.evaluations:
        v = final.get(e.rate)
        if v is not None and not e.curve_only:
            e.sustainable, e.decided, e.why = v.passed, v.decided, v.why
    lo, hi = s.lo, s.hi
    i_lo, i_hi = s.interval
    at_lo = next((e for e in c.evaluations if e.rate == lo and not e.curve_only), None)
    tok_s = _mean([x.get("steady_throughput_tok_s") for x in at_lo.seeds]) if at_lo else None
    # at the target rate every candidate serves the same requests: one output-token count per request for all (the
    # workload's mean), so candidates at one price tie exactly and the higher max rate ranks first
    out_per_req = c.mean_output_tokens or (
        _mean([x["steady_throughput_tok_s"] / x["steady_requests_per_s"] for x in at_lo.seeds
               if x.get("steady_requests_per_s") and x.get("steady_throughput_tok_s")]) if at_lo else None)
    meets = lo >= target_rate and lo > 0
    hourly = c.usd_per_hour
    doc.update({
        "num_requests_per_run": c.num_requests, "num_requests_per_curve_run": c.curve_requests,
        "service_bound_req_s": round_sig(c.service_bound) if c.service_bound else None,
        "simulations": sum(len(e.seeds) for e in c.evaluations) + (1 if c.probe is not None else 0),
        "max_rate_req_s": round_sig(lo), "bracket_req_s": [round_sig(lo), round_sig(hi) if hi else None],
        "interval_req_s": [round_sig(i_lo), round_sig(i_hi) if i_hi else None],
        "at_search_ceiling": s.at_ceiling, "rates_tested": len(s.verdicts),
        "service_rate_req_s": round_sig(s.service_rate) if s.service_rate else None,
        "service_probe": c.probe.to_json() if c.probe is not None else None,
        "throughput_tok_s_at_max_rate": tok_s,
        "usd_per_mtok_at_max_rate": round_sig(hourly / (tok_s * 3600) * 1e6) if tok_s else None,
        "meets_target_rate": meets,
        "usd_per_mtok_at_target_rate": (round_sig(hourly / (target_rate * out_per_req * 3600) * 1e6)
                                        if meets and out_per_req else None),
        "sd_vs_ar": c.crossover.to_json() if c.crossover else None,
        "vllm_serve": _vllm_serve(plan, c),
        "curve": _curve(c),
    })
    if c.floor_note:  # TPOT_FLOOR_RULE: out of reach at every rate, not simulated
        doc.update(max_rate_req_s=0.0, bracket_req_s=[0.0, 0.0], interval_req_s=[0.0, 0.0], reason=c.floor_note)
        return doc
    if c.scope_note:  # search.scope cheapest: tested at the target only
        doc.update(max_rate_req_s=None, bracket_req_s=[None, round_sig(hi) if hi else None],
                   interval_req_s=[None, round_sig(i_hi) if i_hi else None], reason=c.scope_note,
                   usd_per_mtok_at_max_rate=None, throughput_tok_s_at_max_rate=None)
        return doc
    if s.at_ceiling:
        doc["reason"] = "sustains the search ceiling (search.rate_max)"
    elif hi is None:
        doc["reason"] = f"every tested rate passed (search.max_tests reached at {round_sig(lo)} req/s)"
    if lo == 0:
        doc["reason"] = f"no tested rate met the SLO (the lowest tested, {round_sig(hi)} req/s, failed)"
    elif not meets:
        doc["reason"] = f"sustains {round_sig(lo)} req/s < target {round_sig(target_rate)}"
    return doc


def _comparison(c: Candidate) -> str:
    """The rule this candidate is compared at (concurrency per target replica, GPUs), from what it runs."""
    seqs = concurrent_sequences(c) // c.replicas
    if c.mode.mode == "psd":
        sub = c.experiment.runs[0].psd.sub_batch(c.experiment.server.max_num_seqs)
        return (f"PSD: {seqs} sequences per target replica in all, split over its two sub-batches of {sub}; "
                f"{c.num_gpus} GPUs ({c.mode.draft_gpus * c.replicas} for drafting)")
    return f"{seqs} sequences per target replica; {c.num_gpus} GPUs"


def _best_research(meets: list[dict[str, Any]], answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first-ranked research row meeting the target, with what it would gain over the deployable answer."""
    row = next((d for d in meets if not d["deploy"]["deployable"]), None)
    if row is None:
        return None
    doc = {"id": row["id"], "why_not_deployable": row["deploy"]["why"], "usd_per_hour": row["usd_per_hour"],
           "max_rate_req_s": row["max_rate_req_s"]}
    if answer is None:
        doc["gain"] = "meets the target where no deployable candidate does"
    elif row["usd_per_hour"] < answer["usd_per_hour"]:
        saved = answer["usd_per_hour"] - row["usd_per_hour"]
        doc["gain"] = f"${round_sig(saved, 3):g}/h less ({saved / answer['usd_per_hour']:.0%} of the answer's cost)"
    elif row["usd_per_hour"] == answer["usd_per_hour"] and row["max_rate_req_s"] > answer["max_rate_req_s"]:
        doc["gain"] = (f"same $/h, max rate {row['max_rate_req_s'] / answer['max_rate_req_s'] - 1:+.0%} "
                       f"({round_sig(row['max_rate_req_s'], 3):g} vs {round_sig(answer['max_rate_req_s'], 3):g} req/s)")
    else:
        doc["gain"] = "none: the deployable answer is no dearer"
    return doc


def _rank_key(d: dict[str, Any]) -> tuple:
    if d["status"] == "ok" and d.get("meets_target_rate"):
        return (0, d["usd_per_hour"], d.get("usd_per_mtok_at_target_rate") or 0.0, -d["max_rate_req_s"], d["id"])
    if d["status"] == "ok":
        return (1, 0.0, 0.0, -(d.get("max_rate_req_s") or 0.0), d["id"])
    if d["status"] == "not_searched":  # search.scope cheapest
        return (2, d["usd_per_hour"], 0.0, 0.0, d["id"])
    return (3, 0.0, 0.0, 0.0, d["id"])  # does not fit


def plan_document(plan: PlanConfig, cands: list[Candidate], prices: dict[str, GpuPrice], traffic: TrafficModel,
                  seeds: list[int], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """plan.json: the question, the rule, the prices and every candidate ranked (deterministic: no times)."""
    from simulator.measure.steady_state import OVERLOAD_RULE, WINDOW_RULE

    target = traffic.target_rate
    ranked = sorted((candidate_result(c, target, plan) for c in cands), key=_rank_key)
    meets = [d for d in ranked if d["status"] == "ok" and d.get("meets_target_rate")]
    cheapest = next((d["id"] for d in meets if d["deploy"]["deployable"]), None)
    research = _best_research(meets, next((d for d in meets if d["id"] == cheapest), None))
    s = plan.search
    used = sorted({c.gpu for c in cands})
    notes = []
    if any(c.target_costs.startswith("roofline") for c in cands):
        notes.append(ROOFLINE_NOTE)
    if any(c.replicas != 1 for c in cands):
        router = plan.candidates.router.model_dump(mode="json", exclude_none=True)
        notes.append(f"replicas > 1: the whole cluster is simulated (one Environment, each replica with its own "
                     f"scheduler, KV and drafter placement) behind router {router}; GPUs and cost are summed "
                     f"over the replicas")
    if base is not None:
        borrowed = acceptance_note(plan, base)
        if borrowed:
            notes.append(borrowed)
        lookup = lookup_note([(c.id, c.deploy) for c in cands if c.deploy], bundle_drafter_specs(plan, base))
        if lookup:
            notes.append(lookup)
    sized = sorted({c.num_requests for c in cands if c.num_requests})
    q = plan.slo.attainment
    doc = {
        "name": plan.name, "description": plan.description,
        "question": {"target": plan.candidates.target, "target_rate_req_s": round_sig(target),
                     "traffic": plan.traffic.model_dump(mode="json"), "num_requests": sized,
                     "recorded_rate_req_s": round_sig(traffic.recorded_rate) if traffic.recorded_rate else None,
                     "slo": plan.slo.model_dump(mode="json")},
        "rule": {
            "window": WINDOW_RULE,
            "overload": OVERLOAD_RULE + "; an overloaded rate is never sustainable",
            "sustainable": (f"stable (not overloaded, seeds pooled) and the SLO attainment of the window "
                            f"requests reaches {q:g} at the low end of its 99.99% interval (a request attains when it "
                            "finishes within every bound); the answer is the highest sustainable rate tested, a lower "
                            "confidence bound on the rate where attainment falls to the target"),
            "interval": (f"attainment: Student-t intervals of {BATCHES} batch means per seed pooled over the "
                         f"seeds; a rate fails decidedly when the high end of the 95% interval is below {q:g}. Rate "
                         "interval: the answer to the lowest decided fail (or the measured service rate) among the "
                         "tested rates"),
            "scope": SCOPE_RULE if s.scope == "cheapest" else "all: every candidate searched to its max rate",
            "crossover": CROSSOVER_RULE if s.crossover else "off",
            "seeds_per_rate_rule": (FIRST_SEED_RULE if s.first_seed_settles else
                                    "every seed at every rate; while undecided the seeds are doubled, up to "
                                    "search.max_seeds"),
            "confidence": ANSWER_CONFIDENCE_RULE,
            "early_stop": EARLY_STOP_RULE if s.early_stop else "off: every run to its last request",
            "service_probe": SERVICE_PROBE_RULE if s.service_probe else "off",
            "size": (f"each run holds at least {s.tail_requests}/(1 - {q:g}) window requests and "
                     f"{s.requests_per_replica} requests per replica (given: {traffic.num_requests})"),
            "service_bound": SERVICE_BOUND_RULE,
            "tpot_floor": TPOT_FLOOR_RULE,
            "search": (f"start at {round_sig(s.rate_start or target)} req/s (or {BELOW_SERVICE:g} x the candidate's "
                       "service bound, or x its probed service rate, when lower), double while passing (never past "
                       f"{MAX_UTILIZATION:g} x a measured service rate)"
                       + (f" (up to {s.rate_max:g})" if s.rate_max else "")
                       + f"; after an overloaded run try {BELOW_SERVICE:g} x its measured service rate (no rate "
                       f"above {MAX_UTILIZATION:g} x it passes); bisect until the "
                       f"bracket is within {s.rel_tol:g} of its top, at most {s.max_tests} rates; then, for the "
                       f"curves only, one run (first seed, {CURVE_SIZE_FRACTION:g} x the search runs' size: the "
                       f"curves read means) at {', '.join(f'{f:g}' for f in s.curve_fractions)} x the max rate"),
            "comparison": ("modes compared at the same max_num_seqs per target replica (PSD: that many in all, "
                           "split over its two sub-batches: simulator/server_config.py PSDConfig.split) and priced "
                           "per GPU, draft GPUs included"),
            "draft_transfer": (DRAFT_TRANSFER_RULE if plan.candidates.draft_transfer == "roofline" else
                               "refuse: a drafter profile measured on another GPU than the candidate's is an error"),
            "deploy": (f"the answer is the cheapest candidate that meets the target and that vLLM can run as simulated "
                       f"({VLLM_RULES}): AR, fixed k (--speculative-config with the simulated method, k and proposer "
                       "settings; MTP: method mtp, the target's own head, k within vLLM's n_predict rule) or k by "
                       "batch size (num_speculative_tokens_per_batch_size); acceptance-driven k, bandits, "
                       "per-request drafter choice and PSD are research rows, never the deploy line"),
            "seeds": seeds, "seeds_per_rate": s.seeds, "max_seeds_per_rate": s.max_seeds,
        },
        "prices": {g: {"usd_per_gpu_hour": prices[g].usd_per_hour, "source": prices[g].source} for g in used},
        "cheapest": cheapest,
        "deploy": next((d["vllm_serve"] for d in ranked if d["id"] == cheapest), None),
        "best_research": research,
        "assumptions": plan_assumptions(plan, cands, base, notes),
        "notes": notes,
        "candidates": ranked,
    }
    return json_ready(doc)
