"""`draftsim bounds`: the PSD pipeline bounds for one (t, V), optionally measured by the engine, and the frontier model.

    draftsim bounds --draft-time T --verify-time V [--simulate] [--json] [--plot PNG]
    draftsim bounds --frontier --alpha-v X [--k K] [--range LO HI] [--json] [--plot PNG]
"""
from __future__ import annotations

import argparse
import json
import sys

from oracle.bounds import MINEDRAFT_RATIO, pipeline_bounds, saving_band


def register(subparsers) -> None:
    p = subparsers.add_parser("bounds", help="PSD vs SD latency/throughput bounds (analytic, simulated, frontier)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft-time", type=float, help="draft time t per step (seconds)")
    p.add_argument("--verify-time", type=float, help="verify time V per step (seconds)")
    p.add_argument("--simulate", action="store_true",
                   help="also measure gain and saving with the engine (saturated closed loop, constant step costs)")
    p.add_argument("--sub-batch", type=int, default=16, help="--simulate: requests per sub-batch m (SD admits m, "
                   "PSD 2m; 2m closed-loop clients)")
    p.add_argument("--requests", type=int, default=600, help="--simulate: requests per run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--frontier", action="store_true", help="evaluate the exponential drafter-frontier model")
    p.add_argument("--alpha-v", type=float, help="--frontier: alpha * V")
    p.add_argument("--k", type=int, default=1, help="--frontier: draft tokens per step (default 1)")
    p.add_argument("--range", type=float, nargs=2, metavar=("LO", "HI"), default=(0.01, 100.0),
                   help="--frontier: alpha*V range for the summary and the plot")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--plot", metavar="PNG", help="write a plot (saving vs t/V, or ratio vs alpha*V with --frontier)")
    p.set_defaults(func=run)


def _check_sizes(args: argparse.Namespace) -> None:
    """Flag values the parser accepts but the model or engine cannot use (huge k, step times that overflow)."""
    from traces.limits import MAX_DRAFT_TOKENS, MAX_NUM_REQUESTS

    if not 1 <= args.k <= MAX_DRAFT_TOKENS:
        raise ValueError(f"bounds --k: expected draft tokens per step in [1, {MAX_DRAFT_TOKENS}], got {args.k}")
    if args.frontier:
        for flag, v in (("--alpha-v", args.alpha_v), ("--range", args.range[1])):
            if v is not None and not v <= 1e6:  # beyond it the minimiser overflows; nan fails here too
                raise ValueError(f"bounds {flag}: expected a finite alpha*V of at most 1e6, got {v}")
    if args.simulate:
        for flag, v in (("--draft-time", args.draft_time), ("--verify-time", args.verify_time)):
            if v is not None and not v <= 3600:
                raise ValueError(f"bounds {flag}: --simulate needs a step time of at most 3600 s, got {v}")
        if not 1 <= args.sub_batch <= 4096:
            raise ValueError(f"bounds --sub-batch: expected an integer in [1, 4096], got {args.sub_batch}")
        if not 1 <= args.requests <= MAX_NUM_REQUESTS:
            raise ValueError(f"bounds --requests: expected an integer in [1, {MAX_NUM_REQUESTS}], got {args.requests}")


def run(args: argparse.Namespace) -> int:
    _check_sizes(args)
    if args.frontier:
        return _frontier(args)
    if args.draft_time is None or args.verify_time is None:
        raise ValueError("bounds: give --draft-time and --verify-time (seconds), or --frontier --alpha-v X")
    b = pipeline_bounds(args.draft_time, args.verify_time)
    out = b.to_dict()
    if args.simulate:
        from experiments.studies.bounds_sim import simulate_pipeline

        sim = simulate_pipeline(args.draft_time, args.verify_time, sub_batch=args.sub_batch,
                                num_requests=args.requests, seed=args.seed)
        out.update(sim.to_dict())
    if args.plot:
        from experiments.studies.psd_plots import plot_pipeline_saving

        pts = {"this run": [(b.ratio_t_over_v, out["simulated_saving"])]} if args.simulate else None
        plot_pipeline_saving(args.plot, pts, lo=min(0.05, b.ratio_t_over_v), hi=max(5.0, b.ratio_t_over_v))
        out["plot"] = args.plot
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    lo, hi = saving_band()
    print(f"draft time t = {b.draft_time:g} s, verify time V = {b.verify_time:g} s, t/V = {b.ratio_t_over_v:.4g}")
    print(f"analytic throughput gain (t+V)/max(t,V) = {b.analytic_gain:.4f}")
    print(f"analytic latency saving min(t,V)/(t+V)  = {b.analytic_saving:.2%}  (ceiling 50% at t = V; "
          f">= 37% needs t/V in [{lo:.3f}, {hi:.3f}]: {'yes' if b.within_37_band else 'no'})")
    if args.simulate:
        print(f"simulated throughput gain               = {out['simulated_gain']:.4f}  "
              f"({out['gain_error_percent']:+.2f}% vs analytic)")
        print(f"simulated latency saving                = {out['simulated_saving']:.2%}  "
              f"({out['saving_error_points']:+.2f} points vs analytic)")
        print(f"  ({out['setup']})")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def _frontier(args: argparse.Namespace) -> int:
    from oracle.frontier import ASSUMPTIONS, frontier_point, frontier_summary  # scipy: only here

    if args.alpha_v is None:
        raise ValueError("bounds --frontier: give --alpha-v X (alpha times the verify time)")
    lo, hi = args.range
    if not 0 < lo < hi:
        raise ValueError(f"bounds --range: expected 0 < LO < HI, got {lo} {hi}")
    p = frontier_point(args.alpha_v, args.k)
    s = frontier_summary(args.k, lo, hi)
    if args.plot:
        from experiments.studies.psd_plots import plot_frontier

        plot_frontier(args.plot, ks=tuple(sorted({1, 3, 5, args.k})), lo=lo, hi=hi, mark=args.alpha_v)
    if args.json:
        print(json.dumps({"point": p.to_dict(), "summary": s.to_dict(), "plot": args.plot}, indent=2))
        return 0
    print(f"exponential frontier model at alpha*V = {p.alpha_v:g}, k = {p.k}")
    print(f"  SD : best t/V = {p.sd_best_t_over_v:.4f}, time per token = {p.sd_time_per_token_over_v:.4f} V")
    print(f"  PSD: best t/V = {p.psd_best_t_over_v:.4f}, time per token = {p.psd_time_per_token_over_v:.4f} V")
    print(f"  T_SD / T_PSD = {p.ratio:.4f}  (saving {p.saving:.2%}); claim ratio >= {MINEDRAFT_RATIO}: "
          f"{'holds' if p.meets_claim else 'FAILS'} here")
    print(f"over alpha*V in [{lo:g}, {hi:g}]: max ratio {s.max_ratio:.4f} (saving {s.max_saving:.2%}) "
          f"at alpha*V = {s.argmax_alpha_v:.4g}")
    if s.claim_holds_from is None:
        print(f"  ratio >= {MINEDRAFT_RATIO} nowhere in this range")
    else:
        print(f"  ratio >= {MINEDRAFT_RATIO} only for alpha*V in [{s.claim_holds_from:.4g}, {s.claim_holds_to:.4g}]; "
              f"below it outside (ratio {s.ratio_at_low_end:.3f} at {lo:g}, {s.ratio_at_high_end:.3f} at {hi:g})")
    print(f"assumptions: {ASSUMPTIONS}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="draftsim")
    register(parser.add_subparsers(dest="command"))
    ns = parser.parse_args(["bounds", *sys.argv[1:]])
    sys.exit(ns.func(ns))
