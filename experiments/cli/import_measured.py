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
    a.add_argument("--k", type=int, default=None, help="num_speculative_tokens, when the counters do not give it (per-position counters, or draft tokens / drafts a whole number)")
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
    for run in runs:
        note = (run.info.get("spec_decode") or {}).get("proposal_rate_note")
        if note:
            print(f"warning: {run.name}: proposal rate {note}", file=sys.stderr)
        for w in run.info.get("arrival_warnings", []) + [run.info.get("cold_first_request")]:
            if w:
                print(f"warning: {w}", file=sys.stderr)
    one = len(runs) == 1
    # a folder name from the file's content (a run label, a rate) is made plain: it never leaves OUT
    names = [f"{j:02d}-{plain_name_from(run.name)}" for j, run in enumerate(runs)]
    acceptance = {}  # run folder name -> its counters' acceptance source (None: said why not)
    with staged_results_folder(args.out, MEASURED_ENTRIES if one else None) as tmp:
        for name, run in zip(names, runs):
            save_measured(run, tmp if one else tmp / name)
            if run.info.get("spec_decode"):
                acceptance[name] = _write_bench_acceptance(run, (tmp if one else tmp / name) / "acceptance.yaml")
    out = Path(args.out)
    for name, run in zip(names, runs):
        left = run.info.get("left_out", {})
        rate = run.info.get("delivered_rate")
        nominal = run.info.get("request_rate")
        folder = out if one else out / name
        print(f"wrote {folder}: {len(run.requests)} requests "
              f"({', '.join(f'{k} {v}' for k, v in left.items() if k != 'ids') or 'none left out'})"
              + f"; delivered {'-' if rate is None else f'{rate:.4g}'} req/s (nominal {nominal_text(nominal)})")
        for who, t in (run.info.get("tpot_mean_s") or {}).items():
            print(f"  mean TPOT ({who}: {run.info['tpot_definitions'][who]}): "
                  f"{'-' if t is None else f'{1e3 * t:.2f} ms'}")
        if acceptance.get(name) is not None:
            print(f"  wrote {folder / 'acceptance.yaml'}: {describe(acceptance[name])}")
    return 0


def _bench_source(runs, k: int | None, origin: dict):
    """One acceptance source from the spec-decode counters of imported runs (a bench JSON's runs, a GuideLLM
    report's benchmarks), pooled: counters summed, the proposal rate from all their requests' output tokens,
    and the per-request histograms where the source had them (GuideLLM's response_metrics)."""
    from traces.acceptance_levels import RequestHistogram, proposal_rate_from_counts, source_from_vllm_counters

    with_sd = [r for r in runs if r.info.get("spec_decode")]
    sds = [r.info["spec_decode"] for r in with_sd]
    drafts = sum(sd["num_drafts"] for sd in sds)
    accepted = sum(sd["accepted_tokens"] for sd in sds)
    widths = {len(sd["per_position_acceptance_rates"]) for sd in sds}
    if len(widths) > 1:
        raise ValueError(f"the runs report different numbers of positions ({sorted(widths)}): not one k")
    per_pos = [sum(sd["per_position_acceptance_rates"][i] * sd["num_drafts"] for sd in sds)
               for i in range(widths.pop())] if widths else []
    kk = k or len(per_pos) or None
    proposal = None
    if kk and all(sd.get("proposal_rate") is not None for sd in sds):
        proposal = proposal_rate_from_counts(sum(q.output_len for r in with_sd for q in r.requests),
                                             sum(len(r.requests) for r in with_sd), drafts, accepted, kk)
    origin = {**origin, "runs_pooled": [r.name for r in with_sd],
              "runs_without_spec_decode": [r.name for r in runs if not r.info.get("spec_decode")]}
    src = source_from_vllm_counters(drafts, accepted, per_pos or None, k, origin, proposal)
    src.requests = [RequestHistogram(f"{r.name}/{h['id']}", h["k"], h["histogram"])
                    for r in with_sd for h in r.info["spec_decode"].get("requests", [])]
    return src


def nominal_text(nominal) -> str:
    """A client's nominal request rate as printed: a number at 4 significant digits, else as the client wrote it
    ("inf", a GuideLLM strategy's rate, or - when none)."""
    if nominal is None:
        return "-"
    return f"{nominal:.4g}" if isinstance(nominal, float) else str(nominal)


def describe(src) -> str:
    """Mean acceptance length per proposing step, the proposal rate and tokens per decode step, in one line."""
    line = f"mean acceptance length {src.mean_length:.3f} per proposing step at k = {src.measured_k}"
    if src.proposal_rate is None:
        return line + "; proposal rate unknown (replayed as proposing on every decode step)"
    return line + (f"; drafter proposed on {100 * src.proposal_rate:.1f}% of decode steps; "
                   f"{src.tokens_per_decode_step():.3f} tokens per decode step")


def _write_bench_acceptance(run, path: Path):
    """The run's spec-decode counters as an acceptance source at `path`; the source, or None (said why)."""
    from traces.acceptance_levels import save_source

    try:
        src = _bench_source([run], None, {"format": run.info["source"]["format"] + " spec-decode counters",
                                          **run.info["source"]})
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
    elif args.file.endswith((".yaml", ".yml")) or _starts_with_brace(args.file):
        from calibration.vllm_steps.from_server import read_measured

        runs = read_measured(args.file)  # a vllm bench JSON (one run a line) or a GuideLLM report
        if not any(r.info.get("spec_decode") for r in runs):
            print(f"draftsim: error: {args.file}: no spec-decode counters (vllm bench: spec_decode_* fields; GuideLLM: "
                  "response_metrics.speculative_decoding per request; was speculative decoding on?)", file=sys.stderr)
            return 2
        src = _bench_source(runs, args.k, {"format": runs[0].info["source"]["format"] + " spec-decode counters",
                                           "file": args.file})
        print(f"{args.file}: pooled the spec-decode counters of {len(src.source['runs_pooled'])} run(s)"
              + (f"; {len(src.source['runs_without_spec_decode'])} without them" if src.source['runs_without_spec_decode']
                 else ""))
    else:
        from traces.importers.vllm_metrics import load_vllm_metrics

        stats = load_vllm_metrics(args.file)
        k = args.k or (None if stats.accepted_per_pos else stats.served_k)  # drafts x k = draft tokens
        src = source_from_vllm_counters(stats.num_drafts, stats.num_accepted_tokens, stats.accepted_per_pos or None,
                                        k, {"format": "vLLM spec_decode counters", "file": args.file},
                                        stats.proposal(k))
    src.target = args.target or src.target
    src.dataset = args.dataset or src.dataset
    src.drafter_kind = args.drafter_kind or src.drafter_kind
    save_source(src, args.out, inputs=[args.file])
    print(f"wrote {args.out}: levels {', '.join(src.levels())}; {describe(src)}")
    return 0


def _starts_with_brace(path: str) -> bool:
    """True when `path` is JSON (a `vllm bench serve` result), read through the one bounded reader."""
    from traces.parsing import read_text

    return read_text(path).lstrip().startswith("{")
