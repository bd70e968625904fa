"""`draftsim traces validate|stats|fit|synth`: check, summarise, fit and generate trace bundles."""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from traces.builtin_bundles import bundle_folder
from traces.synthetic import MODEL_NAMES

if TYPE_CHECKING:  # the heavy modules are imported by the command that runs, not by `draftsim --help`
    from rich.console import Console
    from rich.table import Table

    from traces.bundle import TraceBundle
    from traces.stats import BundleStats, GroupStats


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("traces", help="validate, summarise, fit and generate trace bundles",
                              description="Work with trace bundles (a folder with trace.yaml and requests.jsonl[.gz]).")
    sub = p.add_subparsers(dest="traces_command", metavar="SUBCOMMAND")
    p.set_defaults(func=_usage(p))

    v = sub.add_parser("validate", help="load a bundle with full validation; print OK with counts or the error")
    v.add_argument("path", help="bundle folder or builtin:NAME")
    v.set_defaults(func=run_validate)

    s = sub.add_parser("stats", help="tokens per step at k = 1..8 and uncapped, per-position acceptance, lengths")
    s.add_argument("path", help="bundle folder or builtin:NAME")
    s.add_argument("--k", type=int, default=5, help="k of the per-position acceptance rates (default 5)")
    s.add_argument("--json", action="store_true", help="print machine-readable JSON instead of tables")
    s.set_defaults(func=run_stats)

    f = sub.add_parser("fit", help="fit a synthetic spec (lengths + acceptance models) to measured bundles",
                       description="Each SOURCE is [CATEGORY=]PATH: a bundle folder, builtin:NAME or a SpecDecode-Bench "
                                   ".jsonl file; each source becomes one category of the spec.")
    f.add_argument("sources", nargs="+", metavar="SOURCE")
    f.add_argument("--out", required=True, help="spec YAML to write")
    f.add_argument("--model", action="append", default=[], metavar="DRAFTER=MODEL",
                   help=f"acceptance model for a drafter ({', '.join(MODEL_NAMES)}); default bursty for n-gram, "
                        "positional otherwise")
    f.add_argument("--num-requests", type=int, default=None, help="requests the spec draws by default")
    f.add_argument("--dataset", default="synthetic", help="dataset name the synthetic bundle will carry")
    f.add_argument("--on-mismatch", choices=("error", "shortest", "skip"), default="shortest",
                   help="SpecDecode-Bench sources: what to do when a request's lists differ in length")
    f.set_defaults(func=run_fit)

    g = sub.add_parser("synth", help="draw a synthetic bundle from a spec; the command is recorded in trace.yaml")
    g.add_argument("--spec", required=True, help="spec YAML (from `draftsim traces fit` or written by hand)")
    g.add_argument("--out", required=True, help="bundle folder to write")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--num-requests", type=int, default=None, help="default: the spec's num_requests")
    g.add_argument("--compress", action="store_true", help="write requests.jsonl.gz")
    g.set_defaults(func=run_synth)

    x = sub.add_parser("suffix", help="add a suffix-decoding drafter (vLLM method suffix) computed from the token ids",
                       description="Replay vLLM's suffix-decoding proposer offline over a bundle's token ids (requests "
                                   "in arrival order, each finished before the next) and write the bundle with a "
                                   "drafter of kind suffix (proposal_len and acc_len per position).")
    x.add_argument("path", help="bundle folder or builtin:NAME with prompt_token_ids and output_token_ids")
    x.add_argument("--out", required=True, help="bundle folder to write (never the source)")
    x.add_argument("--name", default="suffix", help="drafter name in the new bundle (default suffix)")
    x.add_argument("--cost-model", default="suffix", help="cost model name the drafter points at (default suffix)")
    x.add_argument("--num-speculative-tokens", type=int, default=None,
                   help="cap on tokens per proposal (default: the tree depth, as vLLM)")
    x.add_argument("--max-tree-depth", type=int, default=24, help="suffix_decoding_max_tree_depth (default 24)")
    x.add_argument("--max-spec-factor", type=float, default=1.0, help="suffix_decoding_max_spec_factor (default 1.0)")
    x.add_argument("--min-token-prob", type=float, default=0.1, help="suffix_decoding_min_token_prob (default 0.1)")
    x.add_argument("--max-cached-requests", type=int, default=10000,
                   help="suffix_decoding_max_cached_requests (default 10000; 0 = no global cache, -1 = no limit)")
    x.add_argument("--compress", action="store_true", help="write requests.jsonl.gz")
    x.set_defaults(func=run_suffix)


def _usage(parser: argparse.ArgumentParser):
    """`draftsim traces` with no subcommand: print its help and exit 2."""
    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2
    return run


# ---------------------------------------------------------------- validate


def run_validate(args: argparse.Namespace) -> int:
    from traces.bundle import load_bundle
    from traces.errors import TraceFormatError

    try:
        b = load_bundle(bundle_folder(args.path))
    except (TraceFormatError, ValueError) as e:
        print(f"INVALID: {e}", file=sys.stderr)
        return 1
    positions = sum(r.output_len for r in b.requests)
    cats = sorted({r.category for r in b.requests if r.category is not None})
    drafters = ", ".join(f"{n} ({d.kind})" for n, d in b.meta.drafters.items())
    print(f"OK {args.path}: {len(b.requests)} requests, {positions} output positions, drafters {drafters}"
          + (f", categories {', '.join(cats)}" if cats else ""))
    return 0


# ---------------------------------------------------------------- stats


def _num(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _group_tables(title: str, g: GroupStats) -> list[Table]:
    from rich.table import Table

    from traces.stats import K_RANGE

    lengths = Table(title=f"{title}: {g.requests} requests, {g.output_tokens} output tokens")
    for col in ("", "mean", "p50", "p90", "max"):
        lengths.add_column(col, justify="right")
    for name, ls in (("prompt_len", g.prompt_len), ("output_len", g.output_len)):
        lengths.add_row(name, _num(ls.mean, 1), _num(ls.p50, 1), _num(ls.p90, 1), str(ls.max))
    tps = Table(title=f"{title}: mean tokens per step")
    tps.add_column("drafter")
    for k in K_RANGE:
        tps.add_column(f"k={k}", justify="right")
    tps.add_column("uncapped", justify="right")
    pos = None
    for name, d in g.drafters.items():
        tps.add_row(name, *[_num(d.tokens_per_step[k]) for k in K_RANGE], _num(d.uncapped))
        if pos is None:
            pos = Table(title=f"{title}: per-position acceptance at k={d.k} (uncond = vLLM counter / drafts; "
                              "cond = given all earlier drafts accepted)")
            pos.add_column("drafter")
            pos.add_column("rate")
            for i in range(d.k):
                pos.add_column(f"pos {i}", justify="right")
            pos.add_column("steps drafting", justify="right")
        pos.add_row(name, "uncond", *[_num(x) for x in d.unconditional], _num(d.draft_fraction))
        pos.add_row("", "cond", *[_num(x) for x in d.conditional], "")
    return [lengths, tps, pos]


def print_stats(stats: BundleStats, console: Console) -> None:
    console.print(f"[bold]target {stats.target}, dataset {stats.dataset}[/bold]")
    for t in _group_tables("all requests", stats.overall):
        console.print(t)
    for cat, g in stats.categories.items():
        for t in _group_tables(f"category {cat}", g):
            console.print(t)


def _finite(x):
    """NaN (a rate with no steps behind it) becomes null, so the output is strict JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def run_stats(args: argparse.Namespace) -> int:
    from rich.console import Console

    from traces.bundle import load_bundle
    from traces.errors import TraceFormatError
    from traces.stats import bundle_stats

    try:
        bundle = load_bundle(bundle_folder(args.path))
    except (TraceFormatError, ValueError) as e:
        print(f"INVALID: {e}", file=sys.stderr)
        return 1
    stats = bundle_stats(bundle, k=args.k)
    if args.json:
        print(json.dumps(_finite(stats.to_dict()), indent=2, allow_nan=False))
    else:
        print_stats(stats, Console(width=160))
    return 0


# ---------------------------------------------------------------- fit and synth


def _load_source(path: str, on_mismatch: str) -> TraceBundle:
    from traces.bundle import load_bundle

    p = bundle_folder(path)
    if p.is_dir():
        return load_bundle(p)
    if p.name.endswith((".jsonl", ".jsonl.gz")):
        from traces.importers.specbench import import_specbench

        return import_specbench(p, on_mismatch=on_mismatch)[0]
    raise ValueError(f"{path}: expected a bundle folder, builtin:NAME or a SpecDecode-Bench .jsonl file")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"{what}: expected NAME=VALUE, got {item!r}")
        out[key] = value
    return out


def check_num_requests(n: int | None) -> None:
    """--num-requests within traces.limits (checked before anything is drawn or allocated)."""
    from traces.limits import MAX_NUM_REQUESTS

    if n is not None and not 1 <= n <= MAX_NUM_REQUESTS:
        raise ValueError(f"--num-requests: expected an integer in [1, {MAX_NUM_REQUESTS:,}], got {n:,}")


def run_fit(args: argparse.Namespace) -> int:
    from traces.atomic import atomic_write_text
    from traces.synthetic.spec import fit_synth_spec, spec_to_yaml

    from traces.atomic import check_output_file
    from traces.bundle import BUNDLE_FILES

    check_num_requests(args.num_requests)
    # before any source is read: OUT is a new path or a regular file that is no source (nor in a source bundle)
    paths = [item.rpartition("=")[2] for item in args.sources]
    inputs = paths + [Path(p) / f for p in paths if Path(p).is_dir() for f in sorted(BUNDLE_FILES)]
    check_output_file(args.out, inputs, "--out")

    sources: dict[str, TraceBundle] = {}
    for item in args.sources:
        cat, sep, path = item.rpartition("=")
        b = _load_source(path, args.on_mismatch)
        name = cat if sep else b.meta.dataset
        if name in sources:
            raise ValueError(f"category {name!r} given twice; name sources CATEGORY=PATH")
        sources[name] = b
    spec = fit_synth_spec(sources, _pairs(args.model, "--model") or None, num_requests=args.num_requests,
                          dataset=args.dataset,
                          description="fitted by: draftsim traces fit " + shlex.join(_fit_argv(args)))
    atomic_write_text(args.out, spec_to_yaml(spec))
    print(f"wrote {args.out}: categories {', '.join(spec.categories)}; drafters {', '.join(spec.drafters)}")
    return 0


def _fit_argv(args: argparse.Namespace) -> list[str]:
    argv = list(args.sources) + ["--out", args.out, "--dataset", args.dataset, "--on-mismatch", args.on_mismatch]
    for m in args.model:
        argv += ["--model", m]
    if args.num_requests is not None:
        argv += ["--num-requests", str(args.num_requests)]
    return argv


def synth_command(args: argparse.Namespace) -> str:
    """The canonical command line that reproduces this synth run (every effective option spelled out)."""
    argv = ["draftsim", "traces", "synth", "--spec", args.spec, "--out", args.out, "--seed", str(args.seed)]
    if args.num_requests is not None:
        argv += ["--num-requests", str(args.num_requests)]
    if args.compress:
        argv.append("--compress")
    return shlex.join(argv)


def run_synth(args: argparse.Namespace) -> int:
    from traces.bundle import save_bundle
    from traces.synthetic.spec import load_synth_spec, make_synthetic_bundle

    from traces.bundle import check_bundle_target

    check_num_requests(args.num_requests)
    check_bundle_target(args.out, args.compress)  # before drawing: a refused folder costs nothing
    spec = load_synth_spec(args.spec)
    bundle = make_synthetic_bundle(spec, seed=args.seed, num_requests=args.num_requests,
                                   command=synth_command(args))
    folder = save_bundle(bundle, args.out, compress=args.compress)
    print(f"wrote {folder}: {len(bundle.requests)} requests, "
          f"{sum(r.output_len for r in bundle.requests)} output positions")
    return 0


def run_suffix(args: argparse.Namespace) -> int:
    from traces.bundle import check_bundle_target, load_bundle, save_bundle
    from traces.errors import TraceFormatError
    from traces.suffix_decoding import SuffixConfig, with_suffix_decoding

    try:
        src = bundle_folder(args.path)
        if Path(args.out).expanduser().resolve() == src.resolve():
            raise ValueError(f"--out {args.out}: is the source bundle; choose another folder")
        check_bundle_target(args.out, args.compress)
        cfg = SuffixConfig(max_tree_depth=args.max_tree_depth, max_spec_factor=args.max_spec_factor,
                           min_token_prob=args.min_token_prob, max_cached_requests=args.max_cached_requests,
                           num_speculative_tokens=args.num_speculative_tokens)
        bundle = with_suffix_decoding(load_bundle(src), cfg, name=args.name, cost_model=args.cost_model)
        folder = save_bundle(bundle, args.out, compress=args.compress)
    except (TraceFormatError, ValueError) as e:
        print(f"draftsim traces suffix: {e}", file=sys.stderr)
        return 2
    n = sum(r.output_len for r in bundle.requests)
    proposing = sum(int((r.drafters[args.name].proposal_len > 0).sum()) for r in bundle.requests)
    accepted = sum(int(r.drafters[args.name].acc_len.sum()) for r in bundle.requests)
    print(f"wrote {folder}: {len(bundle.requests)} requests, {n} output positions; {args.name}: proposes at "
          f"{proposing / n:.1%} of positions, mean tokens per verify step {accepted / n:.3f} at k = {bundle.meta.drafters[args.name].params['num_speculative_tokens']}")
    return 0
