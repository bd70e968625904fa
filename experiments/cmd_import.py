"""`draftsim import-specbench FILE OUT`: convert a SpecDecode-Bench JSONL file to a trace bundle."""
from __future__ import annotations

import argparse

from traces.importers.specbench import MISMATCH_POLICIES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "import-specbench",
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from traces.bundle import save_bundle
    from traces.importers.specbench import import_specbench

    bundle, report = import_specbench(args.file, on_mismatch=args.on_mismatch, dataset=args.dataset)
    folder = save_bundle(bundle, args.out, compress=args.compress)
    cut = ", ".join(f"{k} {v}" for k, v in report.positions_cut.items())
    print(f"wrote {folder}: {len(bundle.requests)} requests, dataset {bundle.meta.dataset}; "
          f"mismatched {report.mismatched_requests} (policy {report.policy}; skipped "
          f"{len(report.skipped_ids)}; positions cut: {cut})")
    return 0
