"""`draftsim policies`: list the registered policies; run the bandit and combination studies; make pools."""
from __future__ import annotations

import argparse
import inspect
import json
from typing import Any



def policy_listing() -> list[dict[str, Any]]:
    """One entry per registered policy: name, oracle flag, parameters with defaults, description."""
    import oracle.registry  # noqa: F401  (registers the ground-truth policies)
    from policies.registry import POLICIES, known_policy_names, plugin_entry_points, policy_class, policy_parameters

    plugins = plugin_entry_points()
    out = []
    for name in known_policy_names():
        ep = plugins.get(name) if name not in POLICIES else None
        source = "built-in" if ep is None else (f"plug-in ({ep.dist.name} {ep.dist.version})" if ep.dist
                                                 else f"plug-in ({ep.value})")
        try:
            cls = policy_class(name)
        except ValueError as e:  # a broken plug-in is listed with its error; the others still are
            out.append({"name": name, "oracle": False, "parameters": {}, "description": f"cannot load: {e}",
                        "source": source})
            continue
        params = {p: ("<required>" if d is inspect.Parameter.empty else d) for p, d in policy_parameters(name).items()}
        out.append({"name": name, "oracle": bool(cls.reads_ground_truth), "parameters": params,
                    "description": cls.description, "source": source})
    return out


def format_listing(entries: list[dict[str, Any]]) -> str:
    """Plain-text table of the listing."""
    lines = []
    for e in entries:
        params = ", ".join(f"{k}={v!r}" if v != "<required>" else k for k, v in e["parameters"].items())
        tag = ("  [oracle]" if e["oracle"] else "") + (f"  [{e['source']}]" if e.get("source", "built-in") != "built-in"
                                                      else "")
        lines.append(f"{e['name']}{tag}\n    {e['description']}\n    ({params})")
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    entries = policy_listing()
    print(json.dumps(entries, indent=2, default=str) if args.json else format_listing(entries))
    return 0


def _bandit_report(args: argparse.Namespace) -> int:
    from experiments.studies.bandit_report import BanditStudy, run_bandit_study

    from experiments.output_folder import claim_output_folder

    claim_output_folder(args.out, None)  # never a user's folder (run's rules; the study's file names vary)
    summary = run_bandit_study(args.out, BanditStudy.quick() if args.quick else BanditStudy())
    print(json.dumps({k: v for k, v in summary.items() if k != "study"}, indent=2))
    return 0


def _combine_report(args: argparse.Namespace) -> int:
    from experiments.studies.combine_report import CombineStudy, run_combine_study

    from experiments.output_folder import claim_output_folder

    claim_output_folder(args.out, None)  # never a user's folder (run's rules; the study's file names vary)
    study = CombineStudy.quick() if args.quick else CombineStudy()
    if args.traces:
        study.traces_dir = args.traces
    summary = run_combine_study(args.out, study)
    print(json.dumps(summary, indent=2))
    return 0


def _make_pool(args: argparse.Namespace) -> int:
    from traces.bundle import check_bundle_target, save_bundle
    from traces.pool import PoolSpec, make_pool_bundle

    spec = PoolSpec(num_requests=args.requests, output_len=(args.min_len, args.max_len), drift=args.drift,
                    seed=args.seed)
    spec.validate()  # sizes and ranges named before anything is drawn
    check_bundle_target(args.out, args.compress)
    path = save_bundle(make_pool_bundle(spec), args.out, compress=args.compress)
    print(f"wrote {path} ({args.requests} requests, drafters: spec-<category> x {len(spec.categories)}, generalist)")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("policies", help="list drafter policies; bandit/combination studies; drafter pools",
                              description="List the registered policies (default), or run the policy studies.")
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    p.set_defaults(func=_list)
    sub = p.add_subparsers(dest="policies_command", metavar="SUBCOMMAND")
    b = sub.add_parser("bandit-report", help="MetaSD reproduction on synthetic drafter pools (plain loop)")
    b.add_argument("out", help="output folder (CSV, summary.json, PNG)")
    b.add_argument("--quick", action="store_true", help="small sizes (seconds)")
    b.set_defaults(func=_bandit_report)
    c = sub.add_parser("combine-report", help="n-gram/EAGLE combination on the reference traces, batch 1..128")
    c.add_argument("out", help="output folder")
    c.add_argument("--traces", help="folder with combined_*.jsonl (default ../shared/reference-traces/...)")
    c.add_argument("--quick", action="store_true", help="small sizes")
    c.set_defaults(func=_combine_report)
    m = sub.add_parser("make-pool", help="write a synthetic drafter-pool trace bundle")
    m.add_argument("out", help="bundle folder to write")
    m.add_argument("--requests", type=int, default=100)
    m.add_argument("--min-len", type=int, default=200)
    m.add_argument("--max-len", type=int, default=400)
    m.add_argument("--drift", action="store_true", help="category changes inside each request")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--compress", action="store_true", help="requests.jsonl.gz")
    m.set_defaults(func=_make_pool)
