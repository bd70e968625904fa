"""`draftsim placement`: does a deployment fit, how much KV does it hold, and what does a step cost (roofline)?

    draftsim placement --target qwen3-32b --gpu l40s --tp 4 --drafter qwen3-8b --placement colocated --drafter-tp 1
    draftsim placement --catalog            # list the models and GPUs with their derived sizes
"""
from __future__ import annotations

import argparse
import json



def register(subparsers) -> None:
    p = subparsers.add_parser("placement", help="GPU placement and memory: fit, KV capacity, roofline step times",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--catalog", action="store_true", help="list catalog models and GPUs")
    p.add_argument("--target", help="target model (catalog name)")
    p.add_argument("--gpu", help="GPU type (catalog name)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree = target GPUs")
    p.add_argument("--drafter", help="drafter model (catalog name)")
    p.add_argument("--placement", choices=["colocated", "dedicated"], default="colocated")
    p.add_argument("--drafter-tp", type=int, help="drafter shards (colocated: default tp; dedicated: its GPUs)")
    p.add_argument("--drafter-gpu", help="dedicated drafter's GPU type (default --gpu)")
    p.add_argument("--util", type=float, default=0.9, help="gpu_memory_utilization (default 0.9)")
    p.add_argument("--reserve-gib", type=float, default=2.0)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, help="running sequences whose linear-attention state is held "
                                                     "(required for a model with linear-attention layers)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _catalog(as_json: bool) -> int:
    from traces.catalog import GIB, builtin_gpus, builtin_models

    models = {n: {"params_b": m.params / 1e9, "active_params_b": m.active / 1e9,
                  "weights_gib": m.weight_bytes / GIB, "kv_kib_per_token": m.kv_bytes_per_token() / 1024,
                  "dtype": m.dtype} for n, m in builtin_models().items()}
    gpus = {n: {"memory_gb": g.memory_gb, "bandwidth_gbps": g.bandwidth_gbps, "bf16_tflops": g.bf16_tflops,
                "link": g.link} for n, g in builtin_gpus().items()}
    if as_json:
        print(json.dumps({"models": models, "gpus": gpus}, indent=2))
        return 0
    print(f"{'model':18} {'params(B)':>10} {'active(B)':>10} {'weights GiB':>12} {'KV KiB/tok':>11}")
    for n, m in models.items():
        print(f"{n:18} {m['params_b']:10.3g} {m['active_params_b']:10.3g} {m['weights_gib']:12.2f} "
              f"{m['kv_kib_per_token']:11.1f}")
    print(f"\n{'gpu':12} {'memory GB':>10} {'HBM GB/s':>9} {'bf16 TFLOPS':>12}  link")
    for n, g in gpus.items():
        print(f"{n:12} {g['memory_gb']:10g} {g['bandwidth_gbps']:9g} {g['bf16_tflops']:12g}  {g['link']}")
    return 0


def run(args: argparse.Namespace) -> int:
    from simulator.costs.placement import Deployment, plan
    from simulator.costs.roofline import RooflineProfile
    from traces.catalog import get_gpu, get_model

    if args.catalog:
        return _catalog(args.json)
    if not args.target or not args.gpu:
        raise ValueError("placement: give --target and --gpu (catalog names; --catalog lists them)")
    dep = Deployment(args.target, args.gpu, num_gpus=args.tp, tp=args.tp, drafter=args.drafter,
                     drafter_placement=args.placement, drafter_tp=args.drafter_tp,
                     drafter_gpu=args.drafter_gpu, drafter_gpus=(args.drafter_tp or 1) if args.placement == "dedicated" else 1,
                     gpu_memory_utilization=args.util, reserve_gib=args.reserve_gib,
                     max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs)
    p = plan(dep)
    target = RooflineProfile(get_model(args.target), get_gpu(args.gpu), tp=args.tp)
    step = {f"decode_batch_{b}": target.step_time(b, b, b * 1024) for b in (1, 16, 64)}
    out = {**p.summary(), "gpus": [vars(g) for g in p.gpus], "roofline_target_step_s": step}
    dstep = None
    if args.drafter:  # the draft model on the GPUs it runs on: the target's (colocated) or its own (dedicated)
        dtp = args.drafter_tp or (args.tp if args.placement == "colocated" else 1)
        dgpu = args.drafter_gpu if args.placement == "dedicated" and args.drafter_gpu else args.gpu
        drafter = RooflineProfile(get_model(args.drafter), get_gpu(dgpu), tp=dtp)
        dstep = {f"decode_batch_{b}": drafter.step_time(b, b, b * 1024) for b in (1, 16, 64)}
        out.update(roofline_drafter_step_s=dstep, roofline_drafter_device=f"{dtp}x {dgpu}")
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(p.message)
    for g in p.gpus:
        print(f"  {g.role:15} usable {g.usable_gib:6.1f} GiB, weights {g.weights_gib:6.1f}, reserve {g.reserve_gib:.1f}, "
              + (f"linear-attention state {g.state_gib:.1f}, " if g.state_gib else "")
              + f"KV room {g.kv_room_gib:6.1f} GiB = {g.kv_tokens} tokens at {g.kv_bytes_per_token / 1024:.1f} KiB/token")
    print(f"  GPUs used: {p.total_gpus} (divide throughput by this for per-GPU figures)")
    print("  roofline target step (1 token per sequence, 1024 context each): "
          + ", ".join(f"batch {k.rsplit('_', 1)[1]}: {v * 1e3:.2f} ms" for k, v in step.items()))
    if dstep:
        print(f"  roofline drafter step on {out['roofline_drafter_device']} (one draft token per sequence; k of "
              "them per drafting phase): " + ", ".join(f"batch {k.rsplit('_', 1)[1]}: {v * 1e3:.2f} ms"
                                                       for k, v in dstep.items()))
    return 0
