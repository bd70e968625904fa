"""`draftsim import vllm-bench | guidellm | vllm-acceptance`: client benchmark results -> measured runs (for
`draftsim compare`), vLLM's spec-decode counters -> an acceptance source (traces/acceptance_levels.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register_measured(sub: argparse._SubParsersAction) -> None:
    for name, what in (("vllm-bench", "`vllm bench serve --save-result --save-detailed` JSON"),
                       ("guidellm", "GuideLLM benchmarks report (benchmarks.json or .yaml)")):
        p = sub.add_parser(name, help=f"{what} -> measured run folder(s) for `draftsim compare`",
                           description=f"Read a {what} and write, per run in it, a folder with run.json, "
                                       "requests.jsonl (per-request send time, lengths, TTFT, ITLs, E2E) and "
                                       "arrivals.txt (the send times, for a replay workload).")
        p.add_argument("file")
        p.add_argument("out", help="folder to write (one run), or a parent folder with one subfolder per run")
        p.set_defaults(func=_run_import_measured, importer_name=name)
    a = sub.add_parser("vllm-acceptance", help="vLLM spec-decode counters or per-request metrics -> acceptance "
                       "source (mean length, per-position rates, per-request histograms)")
    a.add_argument("file", help="Prometheus /metrics text, get_metrics() JSON, a `vllm bench serve` result JSON, "
                                "or (--per-request) JSONL of responses with metrics.speculative_decoding")
    a.add_argument("out", help="acceptance.yaml to write")
    a.add_argument("--per-request", action="store_true", help="FILE is per-request metrics JSONL")
    a.add_argument("--k", type=int, default=None, help="num_speculative_tokens (when the counters do not say)")
    a.add_argument("--target", default=None, help="target model the acceptance was measured with")
    a.add_argument("--dataset", default=None, help="dataset / workload it was measured on")
    a.add_argument("--drafter-kind", default=None, help="eagle, ngram, draft_model, mtp, ...")
    a.set_defaults(func=_run_import_acceptance)


def _run_import_measured(args: argparse.Namespace) -> int:
    from traces.measured_run import save_measured

    if args.importer_name == "vllm-bench":
        from traces.importers.vllm_bench import import_vllm_bench as read
    else:
        from traces.importers.guidellm import import_guidellm as read
    runs = read(args.file)
    out = Path(args.out)
    for run in runs:
        note = (run.info.get("spec_decode") or {}).get("proposal_rate_note")
        if note:
            print(f"warning: {run.name}: proposal rate {note}", file=sys.stderr)
    for j, run in enumerate(runs):
        folder = save_measured(run, out if len(runs) == 1 else out / f"{j:02d}-{run.name}")
        left = run.info.get("left_out", {})
        print(f"wrote {folder}: {len(run.requests)} requests ({', '.join(f'{k} {v}' for k, v in left.items() if k != 'ids') or 'none left out'})"
              + (f"; acceptance length {run.info['spec_decode']['acceptance_length']:.3f}"
                 if run.info.get("spec_decode") else ""))
        if len(runs) == 1 and run.info.get("spec_decode"):
            _write_bench_acceptance(run, folder / "acceptance.yaml")
    return 0


def _bench_source(run, k: int | None, origin: dict):
    """The acceptance source of an imported run's spec-decode counters, with its proposal rate."""
    from traces.acceptance_levels import source_from_vllm_counters
    from traces.importers.vllm_bench import proposal_of

    sd = run.info["spec_decode"]
    rates = sd["per_position_acceptance_rates"]
    return source_from_vllm_counters(sd["num_drafts"], sd["accepted_tokens"],
                                     [r * sd["num_drafts"] for r in rates] or None, k, origin, proposal_of(sd))


def describe(src) -> str:
    """Mean acceptance length per proposing step, the proposal rate and tokens per decode step, in one line."""
    line = f"mean acceptance length {src.mean_length:.3f} per proposing step at k = {src.measured_k}"
    if src.proposal_rate is None:
        return line + "; proposal rate unknown (replayed as proposing on every decode step)"
    return line + (f"; drafter proposed on {100 * src.proposal_rate:.1f}% of decode steps; "
                   f"{src.tokens_per_decode_step():.3f} tokens per decode step")


def _write_bench_acceptance(run, path: Path) -> None:
    from traces.acceptance_levels import save_source

    try:
        src = _bench_source(run, None, {"format": "vllm bench serve spec_decode_*", **run.info["source"]})
    except ValueError as e:
        print(f"no acceptance source written: {e}", file=sys.stderr)
        return
    src.target = run.info.get("model_id")
    save_source(src, path)
    print(f"wrote {path}: {describe(src)}")


def _run_import_acceptance(args: argparse.Namespace) -> int:
    from traces.acceptance_levels import save_source, source_from_per_request, source_from_vllm_counters

    if args.per_request:
        src = source_from_per_request(args.file)
    elif Path(args.file).is_file() and Path(args.file).read_text(encoding="utf-8", errors="replace").lstrip().startswith("{"):
        from traces.importers.vllm_bench import import_vllm_bench

        runs = import_vllm_bench(args.file)
        sd = runs[0].info.get("spec_decode")
        if not sd:
            print(f"draftsim: error: {args.file}: no spec_decode_* fields (was speculative decoding on?)",
                  file=sys.stderr)
            return 2
        src = _bench_source(runs[0], args.k, {"format": "vllm bench serve spec_decode_*", "file": args.file})
    else:
        from traces.importers.vllm_metrics import load_vllm_metrics

        stats = load_vllm_metrics(args.file)
        src = source_from_vllm_counters(stats.num_drafts, stats.num_accepted_tokens, stats.accepted_per_pos or None,
                                        args.k, {"format": "vLLM spec_decode counters", "file": args.file},
                                        stats.proposal(args.k))
    src.target = args.target or src.target
    src.dataset = args.dataset or src.dataset
    src.drafter_kind = args.drafter_kind or src.drafter_kind
    save_source(src, args.out)
    print(f"wrote {args.out}: levels {', '.join(src.levels())}; {describe(src)}")
    return 0
