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


MEASURED_ENTRIES = frozenset({".draftsim-results", "run.json", "requests.jsonl", "arrivals.txt", "itl.txt",
                              "acceptance.yaml"})


def _run_import_measured(args: argparse.Namespace) -> int:
    from experiments.config import plain_name_from
    from experiments.report import check_results_target, staged_results_folder
    from traces.measured_run import run_document, save_measured

    if args.importer_name == "vllm-bench":
        from traces.importers.vllm_bench import import_vllm_bench as read
    else:
        from traces.importers.guidellm import import_guidellm as read
    check_results_target(args.out, None, [args.file])  # refused before the file is read
    runs = read(args.file)
    for j, run in enumerate(runs):  # every run checked before anything is written; errors name the input
        run_document(run, f"{args.file} (run {j})")
    one = len(runs) == 1
    # a folder name from the file's content (a run label, a rate) is made plain: it never leaves OUT
    names = [f"{j:02d}-{plain_name_from(run.name)}" for j, run in enumerate(runs)]
    acceptance = None
    with staged_results_folder(args.out, MEASURED_ENTRIES if one else None) as tmp:
        for name, run in zip(names, runs):
            save_measured(run, tmp if one else tmp / name)
            if one and run.info.get("spec_decode"):
                acceptance = _write_bench_acceptance(run, tmp / "acceptance.yaml")
    out = Path(args.out)
    for name, run in zip(names, runs):
        left = run.info.get("left_out", {})
        print(f"wrote {out if one else out / name}: {len(run.requests)} requests "
              f"({', '.join(f'{k} {v}' for k, v in left.items() if k != 'ids') or 'none left out'})"
              + (f"; acceptance length {run.info['spec_decode']['acceptance_length']:.3f}"
                 if run.info.get("spec_decode") else ""))
    if acceptance is not None:
        print(f"wrote {out / 'acceptance.yaml'}: mean acceptance length {acceptance.mean_length:.3f} at k = "
              f"{acceptance.measured_k}")
    return 0


def _write_bench_acceptance(run, path: Path):
    """The run's spec-decode counters as an acceptance source at `path`; the source, or None (said why)."""
    from traces.acceptance_levels import save_source, source_from_vllm_counters

    sd = run.info["spec_decode"]
    rates = sd["per_position_acceptance_rates"]
    try:
        src = source_from_vllm_counters(sd["num_drafts"], sd["accepted_tokens"],
                                        [r * sd["num_drafts"] for r in rates] or None, None,
                                        {"format": "vllm bench serve spec_decode_*", **run.info["source"]})
    except ValueError as e:
        print(f"no acceptance source written: {e}", file=sys.stderr)
        return None
    src.target = run.info.get("model_id")
    try:
        save_source(src, path)
    except ValueError as e:
        print(f"no acceptance source written: {e}", file=sys.stderr)
        return None
    return src


def _run_import_acceptance(args: argparse.Namespace) -> int:
    from traces.acceptance_levels import save_source, source_from_per_request, source_from_vllm_counters

    from traces.atomic import check_output_file

    check_output_file(args.out, [args.file], "acceptance file")  # before reading: OUT is never the input
    if args.per_request:
        src = source_from_per_request(args.file)
    elif _starts_with_brace(args.file):
        from traces.importers.vllm_bench import import_vllm_bench

        runs = import_vllm_bench(args.file)
        sd = runs[0].info.get("spec_decode")
        if not sd:
            print(f"draftsim: error: {args.file}: no spec_decode_* fields (was speculative decoding on?)",
                  file=sys.stderr)
            return 2
        rates = sd["per_position_acceptance_rates"]
        src = source_from_vllm_counters(sd["num_drafts"], sd["accepted_tokens"],
                                        [r * sd["num_drafts"] for r in rates] or None, args.k,
                                        {"format": "vllm bench serve spec_decode_*", "file": args.file})
    else:
        from traces.importers.vllm_metrics import load_vllm_metrics

        stats = load_vllm_metrics(args.file)
        src = source_from_vllm_counters(stats.num_drafts, stats.num_accepted_tokens, stats.accepted_per_pos or None,
                                        args.k, {"format": "vLLM spec_decode counters", "file": args.file})
    src.target = args.target or src.target
    src.dataset = args.dataset or src.dataset
    src.drafter_kind = args.drafter_kind or src.drafter_kind
    save_source(src, args.out, inputs=[args.file])
    print(f"wrote {args.out}: levels {', '.join(src.levels())}; mean acceptance length {src.mean_length:.3f} at "
          f"k = {src.measured_k}")
    return 0


def _starts_with_brace(path: str) -> bool:
    """True when `path` is JSON (a `vllm bench serve` result), read through the one bounded reader."""
    from traces.parsing import read_text

    return read_text(path).lstrip().startswith("{")
