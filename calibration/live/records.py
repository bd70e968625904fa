"""What a live run records, and how it is measured and compared with the simulator: request and step records,
modes, metrics, the measured acceptance bundle of the live outputs and the replay check, kept apart from the
runner (calibration/live/runner.py) so the server, the PSD worker and the report share them without private
imports."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from policies.registry import GROUND_TRUTH_POLICIES, PolicySpec, policy_class

if TYPE_CHECKING:
    from calibration.models.drafters import LookupDrafter

METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s", "throughput_tok_s", "steps_per_request")


@dataclass(frozen=True)
class TraceSetting:
    """What the measured acceptance bundle of a live run records about it."""

    workload: str
    target: str
    profile: str  # drafters' cost models are <profile>-<drafter name>
    max_new_tokens: int
    seed: int


@dataclass
class LiveStep:
    """One verify (or plain decode) step as it ran: choice, outcome and wall-clock phases."""

    position: int  # output tokens already generated when the step started
    drafter: str | None
    k: int
    proposed: int
    accepted: int
    emitted: int
    context_len: int  # prompt + output tokens before the step (the simulator's kv_tokens for it)
    draft_s: float
    verify_s: float


@dataclass
class LiveRequest:
    """One request served live: timings from its start (closed loop, think time 0) and every step."""

    id: str
    prompt_len: int
    output_ids: list[int]
    ttft_s: float  # prefill (target and drafters) up to the first output token
    e2e_s: float
    prefill_s: float  # target prefill alone
    drafter_prefill_s: float  # model drafters' prompt passes (the simulator does not price these)
    steps: list[LiveStep] = field(default_factory=list)
    start: float = 0.0  # perf_counter at start, for the makespan


@dataclass(frozen=True)
class LiveMode:
    """One configuration to run live and simulate: a name and its parsed policy (policies/registry.py PolicySpec;
    None: autoregressive)."""

    name: str
    policy: PolicySpec | None


@dataclass
class LiveRun:
    """One mode served live over all requests."""

    mode: LiveMode
    requests: list[LiveRequest]
    load_before: float
    load_after: float


def drafter_name(spec: str) -> str:
    """The name `calibration.models.drafters.parse_drafter` gives a spec, without loading anything."""
    head, _, rest = spec.partition(":")
    if head == "layers":
        return f"layers{rest}"
    if head == "model":
        return Path(rest).name
    return head


def parse_policy_text(text: str) -> dict[str, Any]:
    """A policy given on the command line as YAML (`{name: combine-match, eagle: int8}`) or a bare name."""
    from traces.parsing import parse_yaml

    doc = parse_yaml(text, f"--policy {text!r}", what="YAML value")
    if isinstance(doc, str):
        doc = {"name": doc}
    if not isinstance(doc, dict) or "name" not in doc:
        raise ValueError(f"--policy {text!r}: expected a policy name or a mapping with 'name'")
    return doc


def refuse_oracle(spec: dict[str, Any], where: str) -> None:
    """Oracles read the ground truth, which a live server does not have."""
    if spec["name"] in GROUND_TRUTH_POLICIES or policy_class(spec["name"]).reads_ground_truth:
        raise ValueError(f"{where}: policy {spec['name']!r} is an oracle (it reads the ground-truth trace) and "
                         "cannot run live; use an online policy (fixed, combine-match, metasd-ucb, ...)")


def live_metrics(run: LiveRun, n_tokens: int) -> dict[str, float]:
    """Mean TTFT / TPOT / E2E, throughput over the makespan, verify steps per request."""
    reqs = run.requests
    e2e = np.array([r.e2e_s for r in reqs])
    ttft = np.array([r.ttft_s for r in reqs])
    span = max(r.start + r.e2e_s for r in reqs) - min(r.start for r in reqs)
    return {"ttft_mean_s": float(ttft.mean()), "tpot_mean_s": float(((e2e - ttft) / max(n_tokens - 1, 1)).mean()),
            "e2e_mean_s": float(e2e.mean()), "throughput_tok_s": float(n_tokens * len(reqs) / span),
            "steps_per_request": float(np.mean([len(r.steps) for r in reqs]))}


def sim_metrics(res) -> dict[str, float]:
    """The same metrics as `live_metrics`, from the simulator's request table."""
    r = res.requests
    span = float(r.finish_time.max() - r.arrival_time.min())
    return {"ttft_mean_s": float(r.ttft.mean()), "tpot_mean_s": float(r.tpot.mean()), "e2e_mean_s": float(r.e2e.mean()),
            "throughput_tok_s": float(r.output_len.sum() / span), "steps_per_request": float(r.decode_steps.mean())}


def rel_err(pred: float, meas: float) -> float | None:
    """(predicted - measured) / measured, in percent."""
    return None if meas == 0 else 100.0 * (pred - meas) / meas


# ---------------------------------------------------------------- the whole comparison


def drafter_usage(run: "LiveRun") -> dict[str, int]:
    """Verify steps per drafter over a live run (`none`: plain decode)."""
    out: dict[str, int] = {}
    for r in run.requests:
        for s in r.steps:
            key = s.drafter or "none"
            out[key] = out.get(key, 0) + 1
    return out


def measure_traces(setting: TraceSetting, target, drafters, prompts, outputs: list[list[int]], categories, eos):
    """The acceptance bundle of the live requests: collect's teacher-forced pass over the target's live output."""
    from calibration.collect import measure_request
    from traces.bundle import BundleMeta, DrafterSpec, RequestTrace, TraceBundle

    reqs, mismatches = [], 0
    dlist = list(drafters.values())
    for i, ((rid, ids), out, cat) in enumerate(zip(prompts, outputs, categories)):
        traces, diag = measure_request(target, dlist, ids, out, eos=eos, min_new_tokens=setting.max_new_tokens,
                                       temperature=0.0, rng=np.random.default_rng([setting.seed, i]))
        mismatches += diag["target_mismatch"]
        reqs.append(RequestTrace(id=rid, prompt_len=len(ids), output_len=len(out), drafters=traces, category=cat,
                                 prompt_token_ids=list(ids), output_token_ids=list(out)))
    specs = {d.name: DrafterSpec(d.name, d.kind, f"{setting.profile}-{d.name}", dict(d.params)) for d in dlist}
    meta = BundleMeta(target=setting.target, drafters=specs, temperature=0.0, dataset=setting.workload,
                      source={"kind": "measured", "backend": "hf", "device": "cpu", "prompts": setting.workload,
                              "generation": {"max_new_tokens": setting.max_new_tokens,
                                             "min_new_tokens": setting.max_new_tokens,
                                             "eos_forbidden_before_min_new_tokens": True,
                                             "note": "outputs are the live KV-cached greedy AR outputs"}},
                      extra={"target_argmax_mismatches": int(mismatches)})
    bundle = TraceBundle(meta, reqs)
    bundle.validate("<live traces>")
    return bundle, int(mismatches)


def step_mismatches(bundle, run: "LiveRun") -> int | None:
    """Live steps of a fixed policy whose emitted count differs from the replay rule's at that position."""
    from traces.acceptance import replay_step

    mode = run.mode
    if mode.policy is None or mode.policy.name != "fixed":
        return None if mode.policy is not None else 0
    bad = 0
    for req, tr in zip(run.requests, bundle.requests):
        t = tr.drafters[mode.policy.drafter]
        for s in req.steps:
            prop = None if t.proposal_len is None else int(t.proposal_len[s.position])
            want = replay_step(int(t.acc_len[s.position]), mode.policy.k, prop, s.position, tr.output_len).emitted
            bad += int(want != s.emitted)
    return bad


def tv_distances(p_logits, q_rows: list) -> tuple[float, ...]:
    """TV distance per row between target and drafter softmax at temperature 1 (what the traces record)."""
    import torch

    p, q = torch.softmax(p_logits, dim=-1), torch.softmax(torch.stack(q_rows), dim=-1)
    n = min(p.shape[-1], q.shape[-1])
    return tuple(float(x) for x in (0.5 * (p[..., :n] - q[..., :n]).abs().sum(-1)).clamp(0, 1))




def match_len(d: "LookupDrafter", ctx: list[int]) -> int:
    """Tokens the n-gram drafter can propose now (0: no match), known before drafting."""
    import numpy as np

    start = d.ngram.match_start(np.asarray(ctx, dtype=np.int64))
    return 0 if start is None else min(len(ctx) - start, d.ngram.max_proposal)
