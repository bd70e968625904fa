"""`draftsim specbench`: SpecDecode-Bench's closed-batch AR-vs-SD speedup on one of its JSONL files."""
from __future__ import annotations

import argparse
import json

from simulator.reproductions.specbench import (
    ACC_LISTS,
    DEFAULT_NUM_REQUESTS,
    DEFAULT_SEED,
    NGRAM_MATCH_PROBABILITY,
    POSITION_CONVENTIONS,
    PROPOSERS,
    CompatResult,
    simulate_specbench,
)
from traces.importers.specbench import dataset_from_filename, read_specbench

PREDICTORS = ("FIXED_1", "FIXED_3", "FIXED_5", "ORACLE")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "specbench",
        help="reproduce SpecDecode-Bench's closed-batch speedup (SD vs AR) on one of its trace files",
        description="Closed-batch compatibility mode: 300 sampled requests (random.sample, seed 42), each "
                    "run as a batch of B identical copies with AR and with SD; speedup = mean SD throughput "
                    "/ mean AR throughput. Costs: the release's Llama-3.1-8B / H100 fits.",
    )
    p.add_argument("--trace", required=True, help="SpecDecode-Bench .jsonl file")
    p.add_argument("--dataset", default=None,
                   help="dataset name; sets the n-gram match probability "
                        f"({', '.join(f'{k} {v}' for k, v in NGRAM_MATCH_PROBABILITY.items())}); "
                        "default: from the file name")
    p.add_argument("--proposer", choices=PROPOSERS, required=True)
    p.add_argument("--predict", choices=PREDICTORS, required=True,
                   help="FIXED_k sends k+1 tokens per step; ORACLE sends exactly what will be accepted")
    p.add_argument("--batch-size", type=int, required=True, help="copies of each request in its batch")
    p.add_argument("--charge-winner", action="store_true",
                   help="combined only: charge the winning drafter's own cost instead of n-gram's")
    p.add_argument("--num-requests", type=int, default=DEFAULT_NUM_REQUESTS, help="requests sampled (default 300)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of random.Random for the sample (default 42)")
    p.add_argument("--match-prob", type=float, default=None,
                   help="n-gram match probability where the first draft fails (overrides the dataset's)")
    p.add_argument("--position-convention", choices=POSITION_CONVENTIONS, default="reference",
                   help="reference (default): read acc_len at generated - 1 as the release does, so its published "
                        "numbers reproduce; engine: read it at generated, draftsim's replay rule")
    p.add_argument("--json", action="store_true", help='print {"speedup": x, ...} as JSON')
    p.set_defaults(func=run)


def _simulate(records, args: argparse.Namespace, dataset: str, charge_winner: bool) -> CompatResult:
    return simulate_specbench(records, dataset=dataset, proposer=args.proposer, predict=args.predict,
                              batch_size=args.batch_size, charge_winner=charge_winner,
                              num_requests=args.num_requests, seed=args.seed, match_probability=args.match_prob,
                              position_convention=args.position_convention)


def run(args: argparse.Namespace) -> int:
    if args.charge_winner and args.proposer != "combined":
        raise ValueError("--charge-winner applies only to --proposer combined")
    dataset = args.dataset or dataset_from_filename(args.trace)
    # lengths suffice: the ids and the lists the proposer does not read are checked, not kept
    records = read_specbench(args.trace, token_ids=False, acc_lists=ACC_LISTS[args.proposer])
    result = _simulate(records, args, dataset, args.charge_winner)
    out = result.as_dict()
    other = None
    if args.proposer == "combined":  # report both ways of charging the drafter
        other = _simulate(records, args, dataset, not args.charge_winner)
        ngram_charged, winner_charged = (other, result) if args.charge_winner else (result, other)
        out["speedup_ngram_charged"] = round(ngram_charged.speedup, 6)
        out["speedup_winner_charged"] = round(winner_charged.speedup, 6)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"speedup {result.speedup:.2f}  ({dataset}, {args.proposer}, {args.predict}, B={args.batch_size}; "
          f"{result.num_requests} requests, seed {result.seed}; {args.position_convention} positions)")
    print(f"  throughput AR {result.ar_throughput:.1f} tok/s, SD {result.sd_throughput:.1f} tok/s; "
          f"mean copy latency AR {result.mean_ar_latency_s:.3f} s, SD {result.mean_sd_latency_s:.3f} s; "
          f"SD tokens per step {result.tokens_per_step:.3f}")
    if other is not None:
        label = "n-gram cost on every copy (reference)" if args.charge_winner else "winner's own cost"
        print(f"  charging the {label}: speedup {other.speedup:.2f}")
    return 0
