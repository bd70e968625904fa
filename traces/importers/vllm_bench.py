"""`vllm bench serve --save-result --save-detailed` JSON -> a measured run (traces/measured_run.py).

Format as written by vLLM's benchmark client, vllm/benchmarks/serve.py (read at vllm-project/vllm commit
009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1): one JSON object per run (`--append-result` appends one object
per line). Per request, parallel lists kept only with `--save-detailed`: `start_times` (client
`time.perf_counter()` at send, s), `input_lens`, `output_lens` (0 for a failed request), `ttfts` (s),
`itls` (list of s per request: gaps between streamed chunks), `latencies` (E2E, s), `errors` ("" when the
request succeeded). Run fields: `model_id`, `backend`, `request_rate` (number or "inf"), `burstiness`,
`max_concurrency`, `duration`, and with speculative decoding `spec_decode_acceptance_length`,
`spec_decode_acceptance_rate` (percent), `spec_decode_num_drafts`, `spec_decode_draft_tokens`,
`spec_decode_accepted_tokens`, `spec_decode_per_position_acceptance_rates` (Prometheus counter deltas over
the run: accepted_at_pos[i] / drafts). Those counters cover only decode steps that proposed drafts; the share of
decode steps that did (`proposal_rate`, traces/acceptance_levels.py) is derived from the successful requests'
output tokens beside them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from traces.errors import TraceFormatError, shorten
from traces.measured_run import (MeasuredRequest, MeasuredRun, arrival_check, check_request, cold_first_request,
                                 number)
from traces.parsing import parse_json, read_text

PER_REQUEST = ("start_times", "input_lens", "output_lens", "ttfts", "itls", "latencies", "errors")
RUN_KEYS = ("model_id", "tokenizer_id", "backend", "label", "date", "num_prompts", "request_rate", "burstiness",
            "max_concurrency", "duration", "completed", "failed")
SPEC_KEYS = {"spec_decode_acceptance_length": "acceptance_length", "spec_decode_acceptance_rate": "acceptance_rate_pct",
             "spec_decode_num_drafts": "num_drafts", "spec_decode_draft_tokens": "draft_tokens",
             "spec_decode_accepted_tokens": "accepted_tokens",
             "spec_decode_per_position_acceptance_rates": "per_position_acceptance_rates"}


def read_documents(path: str | Path) -> list[dict[str, Any]]:
    """The run objects of a result file: one JSON object, or one per line (`--append-result`)."""
    where = str(path)
    text = read_text(path)
    if not text.strip():
        raise TraceFormatError(where, "empty file (expected the JSON of `vllm bench serve --save-result`)")
    lines = [(i, s) for i, s in enumerate(text.splitlines(), start=1) if s.strip()]
    try:
        docs = [parse_json(text, where)]  # one object, possibly pretty-printed
    except TraceFormatError:
        if len(lines) == 1:
            raise
        docs = [parse_json(s, where, line=i) for i, s in lines]  # --append-result: one object per line
    for j, d in enumerate(docs):
        if not isinstance(d, dict):
            raise TraceFormatError(where, f"run {j}: expected a JSON object, got {type(d).__name__}")
    return docs


def _lists(doc: dict[str, Any], where: str, run: str) -> dict[str, list]:
    missing = [k for k in PER_REQUEST if k not in doc]
    if missing:
        raise TraceFormatError(where, f"{run}: no per-request field(s) {missing}; rerun `vllm bench serve` with "
                               "--save-result --save-detailed", field=missing[0])
    out = {}
    for k in PER_REQUEST:
        if not isinstance(doc[k], list):
            raise TraceFormatError(where, f"{run}: expected a list, got {type(doc[k]).__name__}", field=k)
        out[k] = doc[k]
    n = {k: len(v) for k, v in out.items()}
    if len(set(n.values())) != 1:
        raise TraceFormatError(where, f"{run}: per-request lists differ in length: {n}", field="start_times")
    return out


def _spec(doc: dict[str, Any], where: str, run: str) -> dict[str, Any] | None:
    present = [k for k in SPEC_KEYS if k in doc]
    if not present:
        return None
    out: dict[str, Any] = {}
    for k, short in SPEC_KEYS.items():
        if k not in doc:
            raise TraceFormatError(where, f"{run}: has {present[0]} but not {k}", field=k)
        if short == "per_position_acceptance_rates":
            v = doc[k]
            if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                  and 0 <= x <= 1 for x in v):
                raise TraceFormatError(where, f"{run}: expected a list of rates in [0, 1]", field=k)
            if any(b > a + 1e-12 for a, b in zip(v, v[1:])):
                raise TraceFormatError(where, f"{run}: per-position rates must not increase with position (vLLM's "
                                       f"counter is P(positions 0..i all accepted)), got {v}", field=k)
            out[short] = [float(x) for x in v]
        else:
            out[short] = number(doc, k, where, k, minimum=1.0 if short == "acceptance_length" else 0.0)
    if out["num_drafts"] and abs(out["acceptance_length"] - 1 - out["accepted_tokens"] / out["num_drafts"]) > 1e-6:
        raise TraceFormatError(where, f"{run}: acceptance length {out['acceptance_length']} is not 1 + accepted / "
                               f"drafts = 1 + {out['accepted_tokens']:g} / {out['num_drafts']:g}",
                               field="spec_decode_acceptance_length")
    return out


def proposal_block(sd: dict[str, Any], reqs: list[MeasuredRequest], run: str) -> dict[str, Any]:
    """The proposal rate of the run's decode steps (traces/acceptance_levels.py `proposal_rate_from_counts`), or
    None with the reason when the counters cannot come from these requests alone."""
    from traces.acceptance_levels import proposal_rate_from_counts

    k = max(len(sd["per_position_acceptance_rates"]), int(np.ceil(sd["draft_tokens"] / sd["num_drafts"])))
    try:
        p = proposal_rate_from_counts(sum(r.output_len for r in reqs), len(reqs), sd["num_drafts"],
                                      sd["accepted_tokens"], k, run)
    except ValueError as e:  # the latencies stand; the acceptance says why it has no proposal rate
        return {"proposal_rate": None, "proposal_rate_note": f"not derived: {e}"}
    return {"proposal_rate": p.rate, "proposal_rate_low": p.rate_low, "decode_steps": p.decode_steps}


def proposal_of(sd: dict[str, Any]):
    """The ProposalRate an imported run's spec_decode block carries, or None."""
    from traces.acceptance_levels import ProposalRate

    if sd.get("proposal_rate") is None:
        return None
    return ProposalRate(sd["proposal_rate"], sd["proposal_rate_low"], sd["decode_steps"], sd["num_drafts"])


def run_from_document(doc: dict[str, Any], where: str, index: int = 0) -> MeasuredRun:
    """One run object -> MeasuredRun; failed requests (a non-empty `errors` entry) are left out and counted."""
    run = f"run {index}"
    cols = _lists(doc, where, run)
    ok = []
    for i, err in enumerate(cols["errors"]):
        if err is not None and not isinstance(err, str):
            raise TraceFormatError(where, f"{run}: expected an error string, got {shorten(err)}", field=f"errors[{i}]")
        if not err:
            ok.append(i)
    if not ok:
        raise TraceFormatError(where, f"{run}: every request failed (first error: {cols['errors'][0]!r})"
                               if cols["errors"] else f"{run}: no requests", field="errors")
    reqs = []
    for i in ok:
        fld = lambda k: f"{k}[{i}]"  # noqa: E731
        vals = {k: cols[k][i] for k in PER_REQUEST}
        nums = {k: number(vals, k, where, fld(k), integer=k in ("input_lens", "output_lens"))
                for k in ("start_times", "input_lens", "output_lens", "ttfts", "latencies")}
        itl = vals["itls"]
        if not isinstance(itl, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in itl):
            raise TraceFormatError(where, f"{run}: expected a list of seconds", field=fld("itls"))
        if nums["output_lens"] < 1:
            raise TraceFormatError(where, f"{run}: a successful request with no output tokens", field=fld("output_lens"))
        r = MeasuredRequest(str(i), nums["start_times"], int(nums["input_lens"]), int(nums["output_lens"]),
                            nums["ttfts"], nums["latencies"], np.asarray(itl, dtype=float))
        check_request(r, where, f"request {i}")
        reqs.append(r)
    t0 = min(r.send_time for r in reqs)
    for r in reqs:
        r.send_time -= t0
    reqs.sort(key=lambda r: (r.send_time, int(r.id)))
    info: dict[str, Any] = {"source": {"format": "vllm bench serve --save-detailed", "file": where, "run": index,
                                       "read_from": "vllm-project/vllm vllm/benchmarks/serve.py @ 009e6d4a"}}
    info.update({k: doc[k] for k in RUN_KEYS if k in doc})
    kept = set(ok)
    failed = [i for i in range(len(cols["errors"])) if i not in kept]
    info["left_out"] = {"failed_requests": len(failed), "ids": [str(i) for i in failed[:20]]}
    info["spec_decode"] = _spec(doc, where, run)
    if info["spec_decode"] and info["spec_decode"]["num_drafts"]:
        info["spec_decode"].update(proposal_block(info["spec_decode"], reqs, run))
    label = doc.get("label") or doc.get("backend") or "vllm"
    run = MeasuredRun(f"{label}-{doc.get('request_rate', 'rate')}", reqs, info)
    # burstiness 1 is Poisson; other values draw gamma gaps of the same mean (a wider tolerance would be needed)
    info.update(arrival_check(run, poisson=True) if doc.get("burstiness", 1.0) == 1.0
                else {"delivered_rate": run.delivered_rate(), "arrival_warnings": []})
    info["cold_first_request"] = cold_first_request(run)
    return run


def import_vllm_bench(path: str | Path) -> list[MeasuredRun]:
    """Every run in the file (one, or one per line with --append-result)."""
    where = str(path)
    return [run_from_document(d, where, j) for j, d in enumerate(read_documents(path))]
