"""Plan search work: simulations and CPU seconds of one plan under several search settings, answers side by side.

Run from the repository root:
    python -m benchmarks.bench_plan_search [CONFIG] [--set KEY=VALUE ...] [--variants base,new] [--known-case]

CONFIG is a plan YAML or built-in name (default: plan_llama8b cut to H100 TP 1, AR + sd-eagle3-k3 + psd-eagle3-k3);
--known-case plans the M/D/1 case of tests/experiments/test_plan.py instead (its bundle and profile written to a
temporary folder; its threshold by the test's Lindley recursion is printed beside). The plan runs serially once per
variant in this process from empty caches (VARIANTS: `base` = every speed-up of experiments/plan off but the
first-seed rule, as before the early stop and the probe; `stop` = + early stop; `probe` = + the saturated
service-rate probe; `new` = both (the defaults); `all-seeds` = every seed at every rate, no early stop, no probe).
Printed per variant: simulations, CPU seconds (this process, serial backend), `uptime`'s load before and after;
per candidate the answer, its interval and whether each variant's answer lies inside the first variant's interval
and the other way round. Nothing is asserted (the tests check the verdicts: tests/experiments/test_plan*.py); the
machine may be shared, so read CPU seconds, not wall time.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time

from experiments.config import read_config_doc
from experiments.plan.config import load_plan_config
from experiments.plan.planner import run_plan


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load %.2f %.2f %.2f" % os.getloadavg()


def cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


VARIANTS = {
    "base": {"first_seed_settles": True, "early_stop": False, "service_probe": False},
    "stop": {"first_seed_settles": True, "early_stop": True, "service_probe": False},
    "probe": {"first_seed_settles": True, "early_stop": False, "service_probe": True},
    "new": {"first_seed_settles": True, "early_stop": True, "service_probe": True},
    "all-seeds": {"first_seed_settles": False, "early_stop": False, "service_probe": False},
}


def default_doc() -> dict:
    doc, _ = read_config_doc("plan_llama8b")
    cands = {**doc["candidates"], "gpus": ["h100-80gb"], "tp": [1],
             "modes": [m for m in doc["candidates"]["modes"] if m["name"] in ("AR", "sd-eagle3-k3", "psd-eagle3-k3")]}
    return {**doc, "name": "plan_llama8b_h100_tp1", "candidates": cands}


def measure(doc: dict, overrides: list[str], variant: str, profile: str | None = None) -> dict:
    sets = [f"search.{k}={str(v).lower()}" for k, v in VARIANTS[variant].items()]
    plan = load_plan_config(doc, [*overrides, *sets])
    with tempfile.TemporaryDirectory(prefix="bench-plan-search-") as tmp:
        load0, t0, c0 = uptime(), time.perf_counter(), cpu_seconds()
        if profile:
            import cProfile

            prof = cProfile.Profile()
            res = prof.runcall(run_plan, plan, tmp, backend="serial", progress=False)
            prof.dump_stats(f"{profile}.{variant}.prof")
        else:
            res = run_plan(plan, tmp, backend="serial", progress=False)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {"variant": variant, "res": res, "cpu_s": cpu, "wall_s": wall, "load_before": load0,
            "load_after": uptime(), "sims": res["_stats"]["computed"]}


def inside(x: float, interval: list) -> bool:
    lo, hi = interval
    return lo <= x and (hi is None or x <= hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--variants", default="base,new", help=f"comma-separated, of {sorted(VARIANTS)}")
    ap.add_argument("--profile", default=None, metavar="PREFIX", help="cProfile each variant to PREFIX.VARIANT.prof")
    ap.add_argument("--known-case", action="store_true", help="the M/D/1 case of tests/experiments/test_plan.py")
    args = ap.parse_args()
    keep = tempfile.TemporaryDirectory(prefix="bench-plan-case-")
    if args.known_case:
        from pathlib import Path

        from tests.experiments.test_plan import TTFT_S, Q, make_known_case, md1_threshold

        doc = make_known_case(Path(keep.name))
        print(f"M/D/1 known case: threshold {md1_threshold(TTFT_S, Q):.3f} req/s (Lindley recursion)")
    else:
        doc = read_config_doc(args.config)[0] if args.config else default_doc()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = sorted(set(names) - set(VARIANTS))
    if bad:
        raise SystemExit(f"--variants: unknown {bad}; expected some of {sorted(VARIANTS)}")
    runs = [measure(doc, args.overrides, v, args.profile) for v in names]
    for m in runs:
        print(f"{m['variant']} ({VARIANTS[m['variant']]}): {m['sims']} simulations, {m['cpu_s']:.1f} CPU s "
              f"({m['wall_s']:.1f} s wall)\n  before: {m['load_before']}\n  after:  {m['load_after']}")
    by_id = [{c["id"]: c for c in m["res"]["candidates"] if c["status"] == "ok"} for m in runs]
    for cid in by_id[0]:
        row = []
        for m, cands in zip(runs, by_id):
            c = cands.get(cid)
            if c is None:
                row.append(f"{m['variant']}: -")
                continue
            text = f"{m['variant']}: {c['max_rate_req_s']:g} {c['interval_req_s']} ({c['simulations']} sims)"
            ref = by_id[0].get(cid)
            if m is not runs[0] and ref is not None:
                text += (f" [first's answer inside: {inside(ref['max_rate_req_s'], c['interval_req_s'])}, "
                         f"inside the first's: {inside(c['max_rate_req_s'], ref['interval_req_s'])}]")
            row.append(text)
        print(f"  {cid}:\n    " + "\n    ".join(row))
    for m in runs[1:]:
        print(f"CPU ratio {runs[0]['variant']}/{m['variant']}: {runs[0]['cpu_s'] / m['cpu_s']:.2f}x, simulations "
              f"{runs[0]['sims']} -> {m['sims']}")


if __name__ == "__main__":
    main()
