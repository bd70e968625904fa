"""`draftsim import ...`: every importer in one group (SpecDecode-Bench traces, MineDraft step traces, vLLM metrics)."""
from __future__ import annotations

import argparse

from traces.importers.specbench import MISMATCH_POLICIES


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser("import", help="convert other tools' traces and metrics into draftsim's formats",
                                  description="Importers: SpecDecode-Bench acceptance traces -> bundle; MineDraft "
                                              "step traces -> latency profiles; vLLM metrics -> acceptance stats.")
    sub = group.add_subparsers(dest="importer", metavar="IMPORTER", required=True)
    p = sub.add_parser(
        "specbench",
        help="convert a SpecDecode-Bench JSONL file (eagle3 + ngram acceptance) into a trace bundle",
        description="Read a SpecDecode-Bench JSONL file and write a draftsim trace bundle folder. "
                    "Requests whose acc_len lists differ in length are handled by --on-mismatch; "
                    "what was done is recorded in trace.yaml 'source'.",
    )
    p.add_argument("file", help="SpecDecode-Bench .jsonl or .jsonl.gz file")
    p.add_argument("out", help="bundle folder to write (created; files replaced atomically)")
    p.add_argument("--on-mismatch", choices=MISMATCH_POLICIES, default="error",
                   help="error: stop at the first mismatched request (default); shortest: cut every list "
                        "to the shortest; skip: leave mismatched requests out")
    p.add_argument("--dataset", default=None, help="dataset name (default: from the file name, "
                                                    "combined_<name>.jsonl)")
    p.add_argument("--compress", action="store_true", help="write requests.jsonl.gz")
    p.set_defaults(func=_run_import_specbench)
    a = sub.add_parser("minedraft", help="MineDraft step trace -> latency profiles (target, draft, overhead)")
    a.add_argument("path", help="MineDraft step-trace file (JSON lines or a JSON list of step records)")
    a.add_argument("--out-dir", required=True)
    a.add_argument("--name", required=True, help="profile name prefix")
    a.add_argument("--model", default="", help="target model name to record")
    a.add_argument("--time-unit", default="s", choices=["s", "ms", "us"], help="unit of measured_*_time fields")
    a.set_defaults(func=_run_import_minedraft)
    b = sub.add_parser("vllm-metrics", help="vLLM Prometheus text or get_metrics() JSON -> acceptance stats")
    b.add_argument("path", help="Prometheus text (/metrics) or JSON list from LLM.get_metrics()")
    b.add_argument("--json", action="store_true", help="print the statistics as JSON")
    b.set_defaults(func=_run_import_vllm)
    from experiments.cli.import_measured import register_measured

    register_measured(sub)


def _run_import_specbench(args: argparse.Namespace) -> int:
    from traces.bundle import save_bundle
    from traces.importers.specbench import import_specbench

    bundle, report = import_specbench(args.file, on_mismatch=args.on_mismatch, dataset=args.dataset)
    folder = save_bundle(bundle, args.out, compress=args.compress)
    cut = ", ".join(f"{k} {v}" for k, v in report.positions_cut.items())
    print(f"wrote {folder}: {len(bundle.requests)} requests, dataset {bundle.meta.dataset}; "
          f"mismatched {report.mismatched_requests} (policy {report.policy}; skipped "
          f"{len(report.skipped_ids)}; positions cut: {cut})")
    return 0


def _run_import_minedraft(args: argparse.Namespace) -> int:
    from pathlib import Path

    from simulator.costs.latency import Measurement, Provenance, fit_linear, save_profile
    from traces.importers.minedraft import load_minedraft_steps, step_measurements

    from experiments.config import check_plain_name

    from experiments.output_folder import claim_output_folder
    from experiments.report import check_results_target

    check_plain_name(args.name, "--name")  # profile files are named <name>-<role>.yaml inside --out-dir
    check_results_target(args.out_dir, None, [args.path])  # run's folder rules, before the trace is read
    steps = load_minedraft_steps(args.path, args.time_unit)
    out = claim_output_folder(args.out_dir, None)
    for role, rows in step_measurements(steps).items():
        if len(rows) < 2:
            print(f"{role}: {len(rows)} usable step(s), not enough to fit; skipped")
            continue
        ms = [Measurement(**r) for r in rows]
        prov = Provenance(source="imported", backend="MineDraft step trace", notes=f"{role} time from {args.path}")
        fit = fit_linear(f"{args.name}-{role}", ms, model=args.model, provenance=prov)
        save_profile(fit.profile, out / f"{args.name}-{role}.yaml")
        print(f"{args.name}-{role}: {len(ms)} steps, MAPE {fit.mape:.2f}%, {fit.profile.coefficients}")
    return 0


def _run_import_vllm(args: argparse.Namespace) -> int:
    import json

    from traces.importers.vllm_metrics import load_vllm_metrics

    stats = load_vllm_metrics(args.path)
    if args.json:
        print(json.dumps(stats.to_dict(), indent=2, allow_nan=False))
    else:
        for k, v in stats.to_dict().items():
            print(f"{k}: {v}")
    return 0
