"""Acceptance traces measured through vLLM: from step records to a trace bundle, checked against vLLM.

A verify step that starts at output position p (p tokens already emitted), drafted n tokens and had a
of them accepted says about the uncapped acc_len of DESIGN "Data model": acc_len[p] = a + 1 exactly
when a < n; when a == n every draft passed and acc_len[p] >= n + 1 only (censored). Positions where
no verify step started (the prefill's token at p = 0, tokens inside an accepted run) are not measured:
the bundle holds the lower bound 1 there, and `censoring.jsonl` beside it lists, per request, the
measured positions and which of them are lower bounds, so nothing is passed off as measured.
proposal_len[p] is what the drafter proposed (vLLM caps it at k; the scheduler may verify fewer).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration.vllm_steps.records import RequestStep, StepLog
from traces.atomic import atomic_write_text
from traces.bundle import BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, save_bundle
from traces.errors import TraceFormatError
from traces.parsing import iter_jsonl

CENSORING_FILE = "censoring.jsonl"
_ENGINE_SUFFIX = re.compile(r"^(?P<client>.+)-[0-9a-f]{8}$")


@dataclass
class ClientRequest:
    """What the client got back for one request: ids, tokens and vLLM's per-request spec-decode metrics."""

    id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    spec_metrics: dict[str, Any] | None = None


@dataclass
class MeasuredAcceptance:
    """One request's acceptance as its verify steps measured it (arrays of length output_len)."""

    acc_len: np.ndarray  # int32 >= 1: exact where measured and not censored, else a lower bound
    proposal_len: np.ndarray  # int32 >= 0
    measured: np.ndarray  # bool: a verify step started here
    censored: np.ndarray  # bool: acc_len is a lower bound (all drafts accepted, or not measured)
    steps: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per verify step


def request_steps(log: StepLog) -> dict[str, list[RequestStep]]:
    """Each engine request's per-step records, in step order."""
    out: dict[str, list[RequestStep]] = {}
    for st in log.steps:
        for r in st.requests:
            out.setdefault(r.id, []).append(r)
    return out


def join_ids(client_ids: list[str], engine_ids: list[str], where: str) -> dict[str, str]:
    """client id -> engine id. vLLM's engine id is the client's id or the client's id plus '-' and 8 hex
    digits; every client request must match exactly one engine request."""
    by_client: dict[str, list[str]] = {}
    for e in engine_ids:
        by_client.setdefault(e, []).append(e)
        m = _ENGINE_SUFFIX.match(e)
        if m:
            by_client.setdefault(m.group("client"), []).append(e)
    out = {}
    for c in client_ids:
        found = by_client.get(c, [])
        if len(found) != 1:
            raise TraceFormatError(where, f"client request {c!r} matches {len(found)} engine requests "
                                   f"({found[:3]}); expected exactly one", field="id")
        out[c] = found[0]
    return out


def measure_acceptance(steps: list[RequestStep], output_len: int, where: str) -> MeasuredAcceptance:
    """Per-position acceptance from one request's steps; checks the kept tokens add up to output_len."""
    acc = np.ones(output_len, dtype=np.int32)
    prop = np.zeros(output_len, dtype=np.int32)
    measured = np.zeros(output_len, dtype=bool)
    censored = np.ones(output_len, dtype=bool)
    verify: list[tuple[int, int]] = []
    pos = 0
    for s in steps:
        if s.emitted and not s.is_prefill:
            if pos >= output_len:
                raise TraceFormatError(where, f"a step starts at output position {pos} but the output has "
                                       f"{output_len} tokens", field="kept")
            acc[pos] = s.accepted + 1
            prop[pos] = s.proposed
            measured[pos] = True
            # exact only when a draft was rejected; with nothing proposed the step emits 1 by definition
            censored[pos] = s.accepted == s.drafted and s.proposed > 0
            if s.drafted:
                verify.append((s.drafted, s.accepted))
        pos += s.kept
    if pos != output_len:
        raise TraceFormatError(where, f"step records keep {pos} tokens but the output has {output_len}",
                               field="kept")
    return MeasuredAcceptance(acc, prop, measured, censored, verify)


def check_against_vllm(m: MeasuredAcceptance, spec_metrics: dict[str, Any] | None, where: str) -> None:
    """The verify steps must equal vLLM's own per-request per-step drafted/accepted counts (detailed)."""
    if spec_metrics is None:
        raise TraceFormatError(where, "no per-request spec-decode metrics (run with "
                               "--per-request-spec-decode-metrics detailed)", field="spec_decode_metrics")
    drafted = spec_metrics.get("per_step_drafted", [])
    accepted = spec_metrics.get("per_step_accepted", [])
    mine = [d for d, _ in m.steps], [a for _, a in m.steps]
    if (list(drafted), list(accepted)) != mine:
        raise TraceFormatError(where, f"step records give drafted {mine[0]} / accepted {mine[1]} but vLLM "
                               f"reports {drafted} / {accepted}", field="spec_decode_metrics")


def build_bundle(log: StepLog, clients: list[ClientRequest], *, drafter: str, kind: str, cost_model: str,
                 params: dict[str, Any], target: str, dataset: str, source: dict[str, Any],
                 where: str) -> tuple[TraceBundle, dict[str, dict[str, Any]]]:
    """The bundle of one spec-decode run and its censoring table (request id -> masks); every client
    request is joined, summed and checked against vLLM's metrics first."""
    per_req = request_steps(log)
    ids = join_ids([c.id for c in clients], list(per_req), where)
    measured = []
    for c in clients:
        rwhere = f"{where} (request {c.id})"
        m = measure_acceptance(per_req[ids[c.id]], len(c.output_token_ids), rwhere)
        check_against_vllm(m, c.spec_metrics, rwhere)
        measured.append((RequestTrace(id=c.id, prompt_len=len(c.prompt_token_ids), output_len=len(c.output_token_ids),
                                      drafters={}, prompt_token_ids=list(c.prompt_token_ids),
                                      output_token_ids=list(c.output_token_ids)), m))
    return assemble_bundle(measured, drafter=drafter, kind=kind, cost_model=cost_model, params=params, target=target,
                           dataset=dataset, source=source)


def bundle_from_steps(log: StepLog, engine_ids: list[str], *, drafter: str, kind: str, cost_model: str,
                      params: dict[str, Any], target: str, dataset: str, source: dict[str, Any],
                      where: str) -> tuple[TraceBundle, dict[str, dict[str, Any]]]:
    """The bundle of engine requests from the step records alone (a served run whose client kept no token ids
    nor vLLM's per-request metrics): output length = the kept tokens, prompt length as the engine saw it."""
    per_req = request_steps(log)
    measured = []
    for e in engine_ids:
        steps = per_req[e]
        out_len = sum(s.kept for s in steps)
        m = measure_acceptance(steps, out_len, f"{where} (request {e})")
        measured.append((RequestTrace(id=e, prompt_len=steps[0].prompt_len, output_len=out_len, drafters={}), m))
    return assemble_bundle(measured, drafter=drafter, kind=kind, cost_model=cost_model, params=params, target=target,
                           dataset=dataset, source=source)


def assemble_bundle(measured: list[tuple[RequestTrace, MeasuredAcceptance]], *, drafter: str, kind: str,
                    cost_model: str, params: dict[str, Any], target: str, dataset: str,
                    source: dict[str, Any]) -> tuple[TraceBundle, dict[str, dict[str, Any]]]:
    """Requests with their measured acceptance -> the bundle and its censoring table."""
    requests, censoring = [], {}
    for r, m in measured:
        requests.append(RequestTrace(id=r.id, prompt_len=r.prompt_len, output_len=r.output_len,
                                     drafters={drafter: DrafterTrace(acc_len=m.acc_len, proposal_len=m.proposal_len)},
                                     prompt_token_ids=r.prompt_token_ids, output_token_ids=r.output_token_ids))
        censoring[r.id] = {drafter: {"measured": np.flatnonzero(m.measured).tolist(),
                                     "censored": np.flatnonzero(m.censored & m.measured).tolist()}}
    meta = BundleMeta(target=target, drafters={drafter: DrafterSpec(drafter, kind, cost_model, params)},
                      dataset=dataset, source={**source, "censoring": CENSORING_FILE,
                                               "acc_len_rule": "exact where measured and not censored; "
                                               "lower bound elsewhere (see censoring file)"})
    return TraceBundle(meta, requests), censoring


def save_measured_bundle(bundle: TraceBundle, censoring: dict[str, dict[str, Any]], path: str | Path) -> Path:
    """Write the bundle and its censoring table (each file atomically)."""
    folder = save_bundle(bundle, path)
    lines = [json.dumps({"id": rid, "drafters": d}, separators=(",", ":")) for rid, d in censoring.items()]
    atomic_write_text(folder / CENSORING_FILE, "\n".join(lines) + "\n")
    return folder


def load_censoring(path: str | Path) -> dict[str, dict[str, dict[str, list[int]]]]:
    """request id -> drafter -> {"measured": positions, "censored": positions}; errors name file and line."""
    path = Path(path)
    out: dict[str, dict[str, dict[str, list[int]]]] = {}
    for i, doc in iter_jsonl(path):
        if not isinstance(doc, dict) or not isinstance(doc.get("id"), str) or not isinstance(doc.get("drafters"), dict):
            raise TraceFormatError(str(path), "expected {\"id\": str, \"drafters\": {...}}", line=i)
        for d, masks in doc["drafters"].items():
            for key in ("measured", "censored"):
                v = masks.get(key) if isinstance(masks, dict) else None
                if not isinstance(v, list) or not all(isinstance(x, int) and x >= 0 for x in v):
                    raise TraceFormatError(str(path), "expected a list of positions >= 0", line=i,
                                           field=f"drafters.{d}.{key}")
        out[doc["id"]] = doc["drafters"]
    return out
