"""`draftsim calibrate acceptance`: measure per-position acceptance of a drafter pool on real models.

The target generates (greedy, or sampled at temperature T) in batches; then each drafter runs
teacher-forced over the target's output: model drafters give their greedy guess and full
distribution at every position (acc_len, tv), the n-gram drafter its match (acc_len,
proposal_len). With a tree option (`tree_top_k`, `tree_depth`) each drafter also gets `tree_rank` from the
same pass (calibration/tree_ranks.py). Progress goes to an append-only partial file (fsync per record) so a crash or
Ctrl-C loses at most the work in flight; a rerun with the same settings continues. The final
bundle is written atomically and the partial file removed.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calibration.acceptance_math import greedy_acc_len, sampled_acc_len
from calibration.models.drafters import LookupDrafter, ModelDrafter
from calibration.prompts import Prompt, workload_prompts
from traces.bundle import (BundleMeta, DrafterSpec, DrafterTrace, RequestTrace, TraceBundle, request_to_dict,
                           save_bundle)
from traces.errors import TraceFormatError

PARTIAL_NAME = ".partial.jsonl"


@dataclass
class AcceptanceConfig:
    """Everything that determines a collected bundle (a rerun must use the same values to resume)."""

    workload: str
    out: str
    target: str = "smollm2-135m-instruct"
    drafters: list[str] = field(default_factory=lambda: ["int8", "layers:24", "layers:20", "ngram"])
    num_requests: int = 80
    max_new_tokens: int = 160
    min_new_tokens: int = 128
    temperature: float = 0.0
    seed: int = 0
    batch_size: int = 8
    threads: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    compress: bool = True
    cost_model_prefix: str = ""  # cost_model names become <prefix><drafter name>
    tree_top_k: int | None = None  # with tree_depth: per position and depth, the target token's rank in the top K
    tree_depth: int | None = None

    def __post_init__(self) -> None:
        from calibration.tree_ranks import check_tree_options

        if (self.tree_top_k is None) != (self.tree_depth is None):
            raise ValueError("tree acceptance needs both --tree-top-k and --tree-depth (got "
                             f"top_k={self.tree_top_k}, depth={self.tree_depth})")
        if self.tree_top_k is not None:
            check_tree_options(self.tree_top_k, self.tree_depth)
            if self.temperature != 0:
                raise ValueError(f"tree acceptance (--tree-top-k) is measured under greedy verification only; "
                                 f"got --temperature {self.temperature}")

    @property
    def tree(self) -> bool:
        """Whether each drafter's trace carries tree_rank."""
        return self.tree_top_k is not None

    def fingerprint(self) -> dict[str, Any]:
        """Settings that change the data (not where it goes or how fast it runs)."""
        d = asdict(self)
        for k in ("out", "threads", "compress"):
            d.pop(k)
        for k in ("tree_top_k", "tree_depth"):  # absent when off, so partial files from before the option resume
            if d[k] is None:
                d.pop(k)
        return d


# ---------------------------------------------------------------- partial file


def _read_partial(path: Path) -> tuple[dict | None, dict[str, dict], dict[str, dict]]:
    """Header, generated outputs and finished requests recorded so far; a torn last line is dropped."""
    if not path.is_file():
        return None, {}, {}
    lines = path.read_text(encoding="utf-8").split("\n")
    header, generated, done = None, {}, {}
    for i, text in enumerate(lines, start=1):
        if not text:
            continue
        try:
            rec = json.loads(text)
        except json.JSONDecodeError as e:
            if i >= len(lines) - 1:  # the record being written when the run stopped
                print(f"draftsim: dropping the unfinished last record of {path} (line {i})", file=sys.stderr)
                continue
            raise TraceFormatError(str(path), f"not valid JSON: {e.msg}", line=i) from e
        kind = rec.get("type")
        if kind == "header":
            header = rec
        elif kind == "generated":
            generated[rec["id"]] = rec
        elif kind == "request":
            done[rec["request"]["id"]] = rec
        else:
            raise TraceFormatError(str(path), f"unknown record type {kind!r}", line=i, field="type")
    return header, generated, done


class _PartialWriter:
    """Append-only JSONL with an fsync after each record."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size:
            with open(path, "rb+") as f:  # cut a torn last line so appends start on a fresh line
                data = f.read()
                if not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        self._f = open(path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        self._f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


# ---------------------------------------------------------------- measurement


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": str(torch.__version__), "transformers": str(transformers.__version__), "python": platform.python_version()}


def _masked(logits, eos: list[int], positions_before: int):
    """EOS is forbidden before min_new_tokens (the generation rule); apply it to every model's logits."""
    if positions_before > 0 and eos:
        logits = logits.clone()
        logits[:positions_before, eos] = float("-inf")
    return logits


def _ngram_sampled(ngram, prompt, output, target_probs, rng) -> tuple[np.ndarray, np.ndarray]:
    """Temperature > 0: a proposed token x is accepted with probability p_target(x) (q is a point mass)."""
    seq = np.asarray(list(prompt) + list(output), dtype=np.int64)
    n = len(output)
    acc, prop = np.ones(n, dtype=np.int32), np.zeros(n, dtype=np.int32)
    for p in range(n):
        t = len(prompt) + p
        start = ngram.match_start(seq[:t])
        if start is None:
            continue
        avail = t - start
        prop[p] = min(avail, ngram.max_proposal)
        run = 0
        while run < min(avail, n - p) and rng.random() < float(target_probs[p + run, seq[start + run]]):
            run += 1
        acc[p] = 1 + run
    return acc, prop


def measure_request(target, drafters, prompt_ids: list[int], output_ids: list[int], *, eos: list[int],
                    min_new_tokens: int, temperature: float, rng: np.random.Generator,
                    tree: tuple[int, int] | None = None) -> tuple[dict, dict]:
    """Per-drafter traces for one request, plus diagnostics (target argmax mismatches, natural EOS).

    `tree` = (top_k, depth) adds tree_rank to every trace, from the same teacher-forced pass (greedy only): a model
    drafter's rank of the target's token in its logits at every position (the prefix rule), the n-gram drafter's
    single candidate per depth (its proposal from p: rank 0 where it matches, else top_k).
    """
    from calibration.tree_ranks import prefix_tree_rank, single_candidate_tree_rank, target_token_ranks
    from calibration.models.generation import probs, teacher_forced_logits, teacher_forced_logits_with_exits, tv_from_logits

    out = np.asarray(output_ids)
    exits = sorted({d.params["layers"] for d in drafters if isinstance(d, ModelDrafter) and d.kind == "truncated"})
    raw_t, exit_logits = teacher_forced_logits_with_exits(target.model, prompt_ids, output_ids, exits)
    k_mask = min(min_new_tokens, len(output_ids))
    natural_end = bool(eos) and k_mask > 0 and bool(np.isin(raw_t[:k_mask].argmax(-1).numpy(), eos).any())
    t_logits = _masked(raw_t, eos, k_mask)
    diag = {"target_mismatch": int((t_logits.argmax(-1).numpy() != out).sum()) if temperature == 0 else 0,
            "natural_eos_before_min": natural_end}
    traces: dict[str, DrafterTrace] = {}
    t_probs = probs(t_logits, temperature).numpy() if temperature > 0 else None
    for d in drafters:
        if isinstance(d, LookupDrafter):
            if temperature > 0:
                acc, prop = _ngram_sampled(d.ngram, prompt_ids, output_ids, t_probs, rng)
            else:
                acc, prop = d.ngram.trace(prompt_ids, output_ids)
            ranks = None
            if tree is not None:
                ranks = single_candidate_tree_rank(d.ngram.proposal_matches(prompt_ids, output_ids)[0], tree[1], tree[0])
            traces[d.name] = DrafterTrace(acc_len=acc, proposal_len=prop, tree_rank=ranks)
            continue
        if d.kind == "truncated":  # same computation as running the copy, without a second pass
            d_logits = _masked(exit_logits[d.params["layers"]], eos, k_mask)
        else:
            d_logits = _masked(teacher_forced_logits(d.model, prompt_ids, output_ids), eos, k_mask)
        tv = tv_from_logits(t_logits, d_logits, temperature)
        if temperature > 0:
            acc = sampled_acc_len(tv, rng)
        else:
            acc = greedy_acc_len(d_logits.argmax(-1).numpy(), out)
        ranks = None
        if tree is not None:
            ranks = prefix_tree_rank(target_token_ranks(d_logits.numpy(), out, tree[0]), tree[1], tree[0])
        traces[d.name] = DrafterTrace(acc_len=acc, tv=tv, tree_rank=ranks)
    return {k: v for k, v in traces.items()}, diag


def _request_rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng([seed, index])


def collect_acceptance(cfg: AcceptanceConfig, *, progress: bool = True, stop_after: int | None = None,
                       prompts: list[Prompt] | None = None) -> Path | None:
    """Run (or resume) a collection; returns the bundle folder, or None when stopped early by stop_after."""
    from calibration.models.generation import generate
    from calibration.models.hf_backend import encode_prompt
    from calibration.models.loading import load_target

    if cfg.num_requests < 1 or cfg.batch_size < 1 or cfg.max_new_tokens < 1:
        raise ValueError("num_requests, batch_size and max_new_tokens must be >= 1")
    if not 0 <= cfg.min_new_tokens <= cfg.max_new_tokens:
        raise ValueError(f"min_new_tokens must be in [0, max_new_tokens], got {cfg.min_new_tokens}")
    out = Path(cfg.out)
    partial = out / PARTIAL_NAME
    header, generated, done = _read_partial(partial)
    if header is not None and header["config"] != json.loads(json.dumps(cfg.fingerprint())):
        raise ValueError(f"{partial} was started with different settings {header['config']}; "
                         "rerun with those settings or delete the partial file to start over")
    all_prompts = prompts if prompts is not None else workload_prompts(cfg.workload, cfg.seed)
    if len(all_prompts) < cfg.num_requests:
        raise ValueError(f"workload {cfg.workload!r} has {len(all_prompts)} prompts, fewer than the "
                         f"{cfg.num_requests} requested")
    chosen = all_prompts[:cfg.num_requests]
    if len(set(cfg.drafters)) != len(cfg.drafters):
        raise ValueError(f"drafter names must be unique, got {list(cfg.drafters)}")
    loaded = load_target(cfg.target, cfg.drafters, dtype=cfg.dtype, device=cfg.device, threads=cfg.threads)
    target, drafters, eos = loaded.lm, list(loaded.drafters.values()), loaded.eos
    writer = _PartialWriter(partial)
    if header is None:
        header = {"type": "header", "config": cfg.fingerprint(),
                  "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "versions": _versions(), "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()}}
        writer.write(header)
    from tqdm import tqdm

    bar = tqdm(total=len(chosen), initial=len(done), desc=f"acceptance {cfg.workload}", disable=not progress,
               file=sys.stderr)
    finished_now = 0
    try:
        for b0 in range(0, len(chosen), cfg.batch_size):
            batch = chosen[b0:b0 + cfg.batch_size]
            todo = [p for p in batch if p.id not in done]
            if not todo:
                continue
            need = [p for p in batch if p.id not in generated]
            if need:  # whole batch composition is fixed by position, so resumed outputs are identical
                ids = [encode_prompt(target, p.text) for p in batch]
                outs = generate(target, ids, max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.min_new_tokens,
                                temperature=cfg.temperature, seed=cfg.seed * 100003 + b0, eos=eos)
                for p, pid, o in zip(batch, ids, outs):
                    if p.id not in generated:
                        rec = {"type": "generated", "id": p.id, "prompt": pid, "output": o}
                        writer.write(rec)
                        generated[p.id] = rec
            for p in todo:
                g = generated[p.id]
                index = chosen.index(p)
                traces, diag = measure_request(target, drafters, g["prompt"], g["output"], eos=eos,
                                               min_new_tokens=cfg.min_new_tokens, temperature=cfg.temperature,
                                               rng=_request_rng(cfg.seed, index),
                                               tree=(cfg.tree_top_k, cfg.tree_depth) if cfg.tree else None)
                req = RequestTrace(id=p.id, prompt_len=len(g["prompt"]), output_len=len(g["output"]),
                                   drafters=traces, category=p.category, prompt_token_ids=g["prompt"],
                                   output_token_ids=g["output"])
                rec = {"type": "request", "request": request_to_dict(req), "diag": diag}
                writer.write(rec)
                done[p.id] = rec
                bar.update(1)
                finished_now += 1
                if stop_after is not None and finished_now >= stop_after:
                    return None
    except KeyboardInterrupt:
        print(f"\ndraftsim: interrupted; progress kept in {partial}. Rerun the same command to continue.",
              file=sys.stderr)
        raise
    finally:
        bar.close()
        writer.close()
    bundle = _assemble(cfg, header, drafters, chosen, done)
    save_bundle(bundle, out, compress=cfg.compress)
    partial.unlink()
    return out


def _assemble(cfg: AcceptanceConfig, header: dict, drafters, chosen: list[Prompt], done: dict) -> TraceBundle:
    """The final bundle, in prompt order, with provenance from the run's header."""
    from traces.bundle import parse_request

    specs = {}
    tree = {"tree_top_k": cfg.tree_top_k, "tree_depth": cfg.tree_depth} if cfg.tree else {}
    for d in drafters:
        specs[d.name] = DrafterSpec(d.name, d.kind, f"{cfg.cost_model_prefix}{d.name}", {**d.params, **tree})
    meta = BundleMeta(target=cfg.target, drafters=specs, temperature=cfg.temperature, dataset=cfg.workload)
    reqs = [parse_request(done[p.id]["request"], meta, "<partial>", i) for i, p in enumerate(chosen, start=1)]
    diags = [done[p.id]["diag"] for p in chosen]
    meta.source = {
        "kind": "measured", "backend": "hf", "device": cfg.device, "dtype": cfg.dtype, "date": header["started"],
        "versions": header["versions"], "machine": header["machine"], "prompts": cfg.workload,
        "generation": {"max_new_tokens": cfg.max_new_tokens, "min_new_tokens": cfg.min_new_tokens,
                       "eos_forbidden_before_min_new_tokens": True, "seed": cfg.seed, "batch_size": cfg.batch_size,
                       "temperature": cfg.temperature},
    }
    meta.extra = {
        "tv_temperature": cfg.temperature if cfg.temperature > 0 else 1.0,
        "acceptance_rule": "greedy: draft argmax == target token" if cfg.temperature == 0
        else "sampled: Bernoulli(1 - tv) per position (model drafters), Bernoulli(p_target(x)) (n-gram)",
        "target_argmax_mismatches": int(sum(d["target_mismatch"] for d in diags)),
        "requests_whose_greedy_output_would_end_before_min_new_tokens": int(
            sum(bool(d["natural_eos_before_min"]) for d in diags)),
    }
    if cfg.tree:
        meta.extra["tree_rank_rule"] = (
            "tree_rank[p][j]: rank of the target's token at p+j among the drafter's top-K next-token candidates "
            "(ties to the lower token id, as argmax), K = not among them or past the end; model drafters (token-prefix "
            "conditioned): the depth-0 rank at p+j of one teacher-forced pass; ngram: one candidate per depth, its "
            "proposal from p (rank 0 where it matches, else K)")
    return TraceBundle(meta, reqs)
