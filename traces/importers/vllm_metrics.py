"""vLLM speculative-decoding metrics -> acceptance statistics.

Reads the Prometheus text of a server's /metrics, or the JSON form of offline
`LLM.get_metrics()` (a list of `{"name", "labels"?, "value"}` counters and
`{"name", "labels"?, "values"}` vectors). Counters used: `vllm:spec_decode_num_drafts`,
`vllm:spec_decode_num_draft_tokens`, `vllm:spec_decode_num_accepted_tokens`,
`vllm:spec_decode_num_accepted_tokens_per_pos` (label `position`); a `_total` suffix is
accepted, and label sets (engines, models) are summed. vLLM's per-position counter is
unconditional: accepted_at_pos[i] / drafts = P(positions 0..i all accepted).

The spec-decode counters cover only decode steps that proposed drafts. With `vllm:generation_tokens` and
`vllm:request_success` (finished requests, all finish reasons summed) beside them, the share of decode steps
that proposed is derived too (traces/acceptance_levels.py `proposal_rate_from_counts`); it is exact only when
no request was running when the metrics were read.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traces.errors import TraceFormatError, shorten
from traces.parsing import parse_json, read_text

MAX_POSITIONS = 1024  # per-position counters: far above any proposal length vLLM allows

_PREFIX = "vllm:spec_decode_"
_RUN_COUNTERS = {"vllm:generation_tokens": "generation_tokens", "vllm:request_success": "finished_requests"}
_LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+([-+0-9.eEinfNa]+)(\s+\d+)?\s*$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class SpecDecodeStats:
    """Totals of vLLM's spec-decode counters and the rates they imply."""

    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_pos: list[float]
    generation_tokens: float | None = None  # vllm:generation_tokens (output tokens), when present
    finished_requests: float | None = None  # vllm:request_success summed over finish reasons, when present

    @property
    def served_k(self) -> int | None:
        """num_speculative_tokens when the counters give it exactly: every draft proposes k tokens, so
        draft tokens / drafts is a whole number k >= 1; None otherwise (then the k must be given)."""
        if not self.num_drafts:
            return None
        ratio = self.num_draft_tokens / self.num_drafts
        return int(ratio) if ratio >= 1 and ratio == int(ratio) else None

    def proposal(self, k: int | None = None):
        """The proposal rate of the decode steps (ProposalRate), or None without the run counters or drafts."""
        from traces.acceptance_levels import proposal_rate_from_counts

        if self.generation_tokens is None or not self.finished_requests or not self.num_drafts:
            return None
        k = k or len(self.accepted_per_pos) or int(math.ceil(self.num_draft_tokens / self.num_drafts))
        return proposal_rate_from_counts(self.generation_tokens, self.finished_requests, self.num_drafts,
                                         self.num_accepted_tokens, k, "vLLM metrics")

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None when nothing was drafted."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per verify step: 1 + accepted / drafts; None when there were no drafts."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def per_pos_rate(self) -> list[float]:
        """P(positions 0..i all accepted), from the unconditional counter."""
        return [a / self.num_drafts for a in self.accepted_per_pos] if self.num_drafts else []

    @property
    def conditional_rate(self) -> list[float | None]:
        """P(position i accepted | positions before it accepted); None where no draft reached position i."""
        rates: list[float | None] = []
        prev = self.num_drafts
        for a in self.accepted_per_pos:
            rates.append(a / prev if prev else None)
            prev = a
        return rates

    def to_dict(self) -> dict[str, Any]:
        p = self.proposal()
        return {"num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens, "accepted_per_pos": self.accepted_per_pos,
                "acceptance_rate": self.acceptance_rate, "mean_acceptance_length": self.mean_acceptance_length,
                "per_pos_rate": self.per_pos_rate, "conditional_rate": self.conditional_rate,
                "generation_tokens": self.generation_tokens, "finished_requests": self.finished_requests,
                "proposal_rate": None if p is None else p.rate, "proposal_rate_low": None if p is None else p.rate_low,
                "decode_steps": None if p is None else p.decode_steps}


def _short(name: str) -> str | None:
    base = name[:-len("_total")] if name.endswith("_total") else name
    if base in _RUN_COUNTERS:
        return _RUN_COUNTERS[base]
    if not name.startswith(_PREFIX):
        return None
    return base[len(_PREFIX):]


def _accumulate(totals: dict[str, float], per_pos: dict[int, float], short: str, labels: dict[str, str],
                value: float, path: str, line: int | None) -> None:
    if not math.isfinite(value) or value < 0:
        raise TraceFormatError(path, f"expected a finite count >= 0, got {value}", line=line, field=short)
    if short == "num_accepted_tokens_per_pos":
        if "position" not in labels:
            raise TraceFormatError(path, "per-position counter without a 'position' label", line=line, field=short)
        raw = labels["position"]
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6 and int(raw) < MAX_POSITIONS):
            raise TraceFormatError(path, f"position label {raw[:20]!r} is not an integer in [0, {MAX_POSITIONS})",
                                   line=line, field=short)
        pos = int(raw)
        per_pos[pos] = per_pos.get(pos, 0.0) + value
    elif short in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "generation_tokens", "finished_requests"):
        totals[short] = totals.get(short, 0.0) + value


def parse_prometheus(text: str, path: str = "<text>") -> SpecDecodeStats:
    """Spec-decode statistics from Prometheus exposition text."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.match(line.strip())
        if not m:
            raise TraceFormatError(path, "not a Prometheus sample line (expected NAME{LABELS} VALUE)", line=i)
        short = _short(m.group(1))
        if short is None:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            value = float(m.group(4))
        except ValueError:
            raise TraceFormatError(path, f"value {m.group(4)!r} is not a number", line=i, field=short) from None
        _accumulate(totals, per_pos, short, labels, value, path, i)
    return _finish(totals, per_pos, path)


def parse_metrics_json(doc: Any, path: str = "<json>") -> SpecDecodeStats:
    """Spec-decode statistics from `LLM.get_metrics()` serialised as a JSON list."""
    if not isinstance(doc, list):
        raise TraceFormatError(path, "expected a JSON list of metrics with name and value/values")
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for j, m in enumerate(doc):
        if not isinstance(m, dict) or not isinstance(m.get("name"), str):
            raise TraceFormatError(path, f"metric {j}: expected an object with a 'name'", field=f"[{j}]")
        short = _short(m["name"])
        if short is None:
            continue
        raw_labels = m.get("labels") or {}
        if not isinstance(raw_labels, dict) or not all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                                       for v in raw_labels.values()):
            raise TraceFormatError(path, f"metric {j}: expected labels as a mapping of name -> string",
                                   field=f"[{j}].labels")
        labels = {str(k): str(v) for k, v in raw_labels.items()}
        if "values" in m:
            vals = m["values"]
            if not isinstance(vals, list):
                raise TraceFormatError(path, f"metric {j}: expected a list", field=f"[{j}].values")
            if short == "num_accepted_tokens_per_pos":
                if len(vals) > MAX_POSITIONS:
                    raise TraceFormatError(path, f"metric {j}: {len(vals)} positions, at most {MAX_POSITIONS}",
                                           field=f"[{j}].values")
                for pos, v in enumerate(vals):
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise TraceFormatError(path, f"metric {j}: expected a number, got {type(v).__name__}",
                                               field=f"[{j}].values[{pos}]")
                    _accumulate(totals, per_pos, short, {"position": str(pos)}, float(v), path, None)
            continue
        v = m.get("value")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TraceFormatError(path, f"metric {j}: expected a number, got {shorten(str(v))}", field=f"[{j}].value")
        _accumulate(totals, per_pos, short, labels, float(v), path, None)
    return _finish(totals, per_pos, path)


def _finish(totals: dict[str, float], per_pos: dict[int, float], path: str) -> SpecDecodeStats:
    missing = [k for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens") if k not in totals]
    if missing:
        raise TraceFormatError(path, f"no vLLM spec-decode counter(s) {', '.join(_PREFIX + k for k in missing)}; "
                               "was speculative decoding enabled?")
    if per_pos and sorted(per_pos) != list(range(len(per_pos))):
        raise TraceFormatError(path, f"per-position counters have gaps: positions {sorted(per_pos)[:20]}")
    if totals["num_accepted_tokens"] > totals["num_draft_tokens"]:
        raise TraceFormatError(path, f"{_PREFIX}num_accepted_tokens ({totals['num_accepted_tokens']:g}) exceeds "
                               f"num_draft_tokens ({totals['num_draft_tokens']:g}): a token must be drafted to be "
                               "accepted")
    if totals["num_draft_tokens"] and not totals["num_drafts"]:
        raise TraceFormatError(path, f"{_PREFIX}num_draft_tokens is {totals['num_draft_tokens']:g} but num_drafts "
                               "is 0")
    for i in range(len(per_pos)):
        if per_pos[i] > (per_pos[i - 1] if i else totals["num_drafts"]):
            raise TraceFormatError(path, f"accepted tokens at position {i} ({per_pos[i]:g}) exceed those at the "
                                   "position before (or the drafts): vLLM's per-position counter only falls")
    if per_pos and sum(per_pos.values()) > totals["num_accepted_tokens"] * (1 + 1e-9) + 1e-9:
        raise TraceFormatError(path, "the per-position accepted counts sum to more than num_accepted_tokens")
    return SpecDecodeStats(totals["num_drafts"], totals["num_draft_tokens"], totals["num_accepted_tokens"],
                           [per_pos[i] for i in range(len(per_pos))], totals.get("generation_tokens"),
                           totals.get("finished_requests"))


def load_vllm_metrics(path: str | Path) -> SpecDecodeStats:
    """Prometheus text or get_metrics() JSON, told apart by the first character."""
    text = read_text(path)  # traces.parsing: regular file, size limit, UTF-8
    if text.lstrip().startswith("["):  # parse_json: nesting, duplicate keys, NaN refused, naming the file
        return parse_metrics_json(parse_json(text, str(path)), str(path))
    return parse_prometheus(text, str(path))
