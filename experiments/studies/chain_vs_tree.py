"""Chain vs tree drafts on the measured SmolLM2-135M tree bundles: mean tokens per verify step per drafter and shape.

A static tree is replayed from each drafter's `tree_rank` rows by the accepted-drafts rule of traces/tree.py
(`tree_accepted`); the replay walk is traces/walk.py's (first step at output position 1, each step emits
1 + accepted, cut at the output's end), fed the tree's acceptance per position, so chains and trees are walked by
one rule. `python -m experiments.studies.chain_vs_tree --out DIR` writes `acceptance.csv` and prints the table;
`--engine` also runs AR, the chains and the trees through the engine (simulator) at
closed-loop batch sizes 1..64 on two targets: SmolLM2-135M with its measured CPU profiles (the int8 copy drafting,
priced by its measured profile) and Llama-3.1-8B / H100 with the published SpecDecode-Bench fit (the EAGLE-3 head's
published cost, acceptance borrowed from SmolLM2's int8 copy), and writes `speedup.csv` and `speedup.png`.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from traces.bundle import DrafterTrace, TraceBundle, load_bundle
from traces.tree import TreeShape, chain_tree, tree_accepted, tree_capacity_check, tree_from_paths, tree_from_widths
from traces.walk import walk_many

BUNDLE_DIR = Path(__file__).resolve().parents[2] / "traces" / "data" / "bundles"
TREE_BUNDLES = ("smollm2-135m-instruct-chat-tree", "smollm2-135m-instruct-code-edit-tree")

# A 21-node tree shaped like EAGLE's static trees (most nodes below the top-ranked guesses), the size of the tree
# the "Performance or Illusion?" paper verifies; depth 6, children of rank <= 3.
EAGLE_LIKE_21 = [(0,), (1,), (2,), (3,),
                 (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0),
                 (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0),
                 (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0),
                 (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
                 (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 1, 0)]


@dataclass(frozen=True)
class NamedShape:
    """A draft shape of the study: its label and tree (a chain of k is the tree of widths [1] * k)."""

    label: str
    tree: TreeShape


def study_shapes() -> list[NamedShape]:
    """Chains k = 3 and 5, the full tree of widths [2, 2, 1] (10 nodes) and the 21-node EAGLE-like tree."""
    return [NamedShape("chain-k3", chain_tree(3)), NamedShape("chain-k5", chain_tree(5)),
            NamedShape("tree-2-2-1", tree_from_widths([2, 2, 1])),
            NamedShape("tree-eagle21", tree_from_paths(EAGLE_LIKE_21, "EAGLE_LIKE_21"))]


def tree_acc_len(trace: DrafterTrace, tree: TreeShape) -> np.ndarray:
    """Per output position, 1 + the drafts `tree` accepts there (the tree's acc_len, at most depth + 1)."""
    if trace.tree_rank is None:
        raise ValueError("this drafter's trace has no tree_rank (collect it with --tree-top-k/--tree-depth)")
    rows = np.asarray(trace.tree_rank)
    return np.array([1 + tree_accepted(tree.parent, tree.rank, rows[p]) for p in range(rows.shape[0])],
                    dtype=np.int32)


def tokens_per_step(bundle: TraceBundle, drafter: str, tree: TreeShape) -> float:
    """Mean tokens per verify step of `drafter` drafting `tree` over every request of `bundle`."""
    spec = bundle.meta.drafters[drafter]
    why = tree_capacity_check(tree, int(spec.params["tree_top_k"]), int(spec.params["tree_depth"]))
    if why is not None:
        raise ValueError(f"drafter {drafter}: {why}")
    traces = [DrafterTrace(acc_len=tree_acc_len(r.drafters[drafter], tree)) for r in bundle.requests]
    return walk_many(traces, tree.depth).tokens_per_step


def acceptance_rows(bundles: dict[str, TraceBundle], shapes: list[NamedShape]) -> list[dict]:
    """One row per bundle, drafter and shape: nodes verified per step and mean tokens per step."""
    rows = []
    for bname, b in bundles.items():
        for d in b.meta.drafters:
            for s in shapes:
                rows.append({"bundle": bname, "drafter": d, "shape": s.label, "nodes": s.tree.n_nodes,
                             "tokens_per_step": round(tokens_per_step(b, d, s.tree), 4)})
    return rows


TARGETS = {
    "smollm2-135m-cpu": {"server": {"target_profile": "smollm2-135m-instruct-cpu", "step_overhead_s": 0.0,
                                    "kv_capacity_tokens": 200000},
                         "drafter": {"kind": "autoregressive", "profile": "smollm2-135m-instruct-cpu-int8"}},
    "llama3.1-8b-h100": {"server": {"target_profile": "llama3.1-8b-h100-specbench",
                                     "step_overhead_s": 0.00120683946, "kv_capacity_tokens": 430000},
                         "drafter": {"kind": "whole_proposal", "profile": "eagle3-llama3.1-8b-h100-specbench"}},
}
DRAFTER = "int8"


@dataclass(frozen=True)
class EngineStudy:
    """Batch sizes, requests per run (at least `min_requests`, `requests_per_client` per client) and seed."""

    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    targets: tuple[str, ...] = tuple(TARGETS)
    cpu_verify_profile: str | None = None  # SmolLM2's target profile instead of the shipped one (a tree-verify fit)
    requests_per_client: int = 3
    min_requests: int = 24
    seed: int = 0


def study_config(bundle: Path, target: str, batch: int, shapes: list[NamedShape], study: EngineStudy) -> dict:
    """One experiment: AR and every shape drafted by the int8 drafter, `batch` closed-loop clients."""
    t = TARGETS[target]
    if target == "smollm2-135m-cpu" and study.cpu_verify_profile:
        t = {**t, "server": {**t["server"], "target_profile": study.cpu_verify_profile}}
    runs = [{"name": "AR", "mode": "ar"}]
    for sh in shapes:
        paths = [list(pth) for pth in sh.tree.paths]
        runs.append({"name": sh.label, "mode": "sd", "policy": {"name": "fixed", "drafter": DRAFTER, "tree": paths}})
    n = max(study.min_requests, study.requests_per_client * batch)
    return {"name": f"chain-vs-tree-{target}", "seed": study.seed, "traces": str(bundle),
            "workload": {"num_requests": n, "arrival": {"kind": "closed_loop", "clients": batch, "think_time": 0.0},
                         "lengths": {"source": "bundle"}, "sample": {"with_replacement": True, "shuffle": True}},
            "server": {**t["server"], "max_num_seqs": max(batch, 1), "max_num_batched_tokens": 16384,
                       "block_size": 16, "temperature": 0.0},
            "drafters": {DRAFTER: dict(t["drafter"])}, "runs": runs, "baseline": "AR"}


def run_engine_study(out: Path, bundles: dict[str, Path], study: EngineStudy | None = None) -> "pd.DataFrame":
    """Speedup over AR (steady-state output throughput) per target, bundle, batch and shape; speedup.csv/.png."""
    import pandas as pd

    from experiments.run import run_experiment
    from experiments.studies.bandit_report import _write_csv

    study = study or EngineStudy()
    shapes = study_shapes()
    rows = []
    for target in study.targets:
        for bname, path in bundles.items():
            for batch in study.batch_sizes:
                res = run_experiment(study_config(path, target, batch, shapes, study))
                ar = res.summary["AR"]["throughput_tok_s"]
                for sh in shapes:
                    sm = res.summary[sh.label]
                    rows.append({"target": target, "bundle": bname, "batch": batch, "shape": sh.label,
                                 "nodes": sh.tree.n_nodes, "speedup": sm["throughput_tok_s"] / ar,
                                 "mean_acceptance_length": sm.get("mean_acceptance_length")})
    df = pd.DataFrame(rows)
    _write_csv(df, out / "speedup.csv")
    _plot_speedup(df, out / "speedup.png")
    return df


def _plot_speedup(df, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.plots import save_figure

    panels = sorted({(t, b) for t, b in zip(df["target"], df["bundle"])})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (target, bname) in zip(axes[0], panels):
        sub = df[(df["target"] == target) & (df["bundle"] == bname)]
        for shape, g in sub.groupby("shape", sort=False):
            ax.plot(g["batch"], g["speedup"], marker="o", label=f"{shape} (N={int(g['nodes'].iloc[0])})")
        ax.set_xscale("log", base=2)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("batch size (closed-loop clients)")
        ax.set_ylabel("throughput speedup over AR")
        ax.set_title(f"{target}\n{bname.replace('smollm2-135m-instruct-', '')} acceptance (int8)", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from traces.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for acceptance.csv (and speedup.csv/.png with --engine)")
    ap.add_argument("--engine", action="store_true", help="also simulate batch 1..64 on both targets")
    ap.add_argument("--cpu-verify-profile", default=None,
                    help="SmolLM2's target profile (name or YAML path) instead of smollm2-135m-instruct-cpu, e.g. a "
                         "fit of `calibrate latency --verify-mask tree`")
    args = ap.parse_args(argv)
    bundles = {name: load_bundle(BUNDLE_DIR / name) for name in TREE_BUNDLES}
    table = pd.DataFrame(acceptance_rows(bundles, study_shapes()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "acceptance.csv", table.to_csv(index=False))
    print(table.pivot_table(index=["bundle", "drafter"], columns="shape", values="tokens_per_step").to_string())
    if args.engine:
        df = run_engine_study(out, {name: BUNDLE_DIR / name for name in TREE_BUNDLES},
                              EngineStudy(cpu_verify_profile=args.cpu_verify_profile))
        print(df.pivot_table(index=["target", "bundle", "shape"], columns="batch", values="speedup").round(2)
              .to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
