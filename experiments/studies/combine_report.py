"""n-gram/EAGLE combination study on the reference traces, batch 1..128, honest and reference costs.

Imports the SpecDecode-Bench files (lists cut to the shortest where the two runs differ), adds the
server-visible prompt-lookup match length to the n-gram drafter, then runs
`experiments/configs/adaptive_combine.yaml` through the engine for every dataset and batch size
(closed loop with that many clients). The "reference" run repeats the max-tokens oracle combine
with EAGLE priced like the n-gram (only the n-gram's drafting cost is charged, as the paper does).
Every oracle runs greedy (the reference's) and exact (`-exact`, `oracle.exact`): `decode_steps` shows the
steps the exact plan saves.
Speedup = output throughput / the AR run's at the same batch size (makespan based, so a few very
long requests can dominate at large batch); `tpot_speedup` = mean over requests of AR's TPOT over
the run's TPOT for the same request (per-request decode speed).
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.studies.bandit_report import _plot, _write_csv
from experiments.config import builtin_config_dir, read_config_doc
from experiments.run import run_experiment
from traces.atomic import atomic_write_text
from traces.bundle import TraceBundle, save_bundle
from traces.prompt_lookup import with_prompt_lookup

REFERENCE_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "reference-traces" / "specbench-llama3.1-8b-h100"
NGRAM_COST = {"kind": "fraction_of_verify", "fraction": 0.005875}


@dataclass
class CombineStudy:
    """Datasets, batch sizes and request counts of the study (`quick` for tests)."""

    traces_dir: str | Path = REFERENCE_DIR
    datasets: tuple[str, ...] = ("gsm8k", "instructcoder")
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    max_requests: int | None = None  # requests per run, the same sample at every batch size; None: every trace once
    min_n: int = 3
    max_n: int = 4
    runs: tuple[str, ...] | None = None  # None: every run of the config
    seed: int = 0

    @classmethod
    def quick(cls) -> "CombineStudy":
        return cls(datasets=("instructcoder",), batch_sizes=(1, 16), max_requests=24)


def import_reference(study: CombineStudy, out: Path) -> dict[str, Path]:
    """Bundle folder per dataset under out/bundles (imported once; reused when present)."""
    from traces.importers.specbench import import_specbench

    paths = {}
    for ds in study.datasets:
        src = Path(study.traces_dir) / f"combined_{ds}.jsonl"
        if not src.is_file():
            raise FileNotFoundError(f"{src}: reference trace file not found (expected ../shared/reference-traces)")
        dest = out / "bundles" / ds
        if not (dest / "trace.yaml").is_file():
            bundle, _ = import_specbench(src, on_mismatch="shortest", dataset=ds)
            save_bundle(with_prompt_lookup(bundle, study.min_n, study.max_n), dest, compress=True)
        paths[ds] = dest
    return paths


def open_requests(bundle: Path):
    """Lines of a bundle's requests file (to count traces without parsing them)."""
    import gzip

    f = bundle / "requests.jsonl.gz"
    with (gzip.open(f, "rt", encoding="utf-8") if f.is_file() else open(bundle / "requests.jsonl", encoding="utf-8")) as fh:
        yield from fh


def _configs(study: CombineStudy, bundle: Path, batch: int) -> list[dict[str, Any]]:
    doc, _ = read_config_doc(builtin_config_dir() / "adaptive_combine.yaml")
    doc = copy.deepcopy(doc)
    doc["traces"] = str(bundle)
    doc["seed"] = study.seed
    doc["workload"]["arrival"]["clients"] = batch
    n_traces = sum(1 for _ in open_requests(bundle))
    n = study.max_requests or n_traces
    doc["workload"]["num_requests"] = n
    doc["workload"]["sample"] = {"with_replacement": n > n_traces, "shuffle": True}
    if study.runs:
        doc["runs"] = [r for r in doc["runs"] if r["name"] in study.runs or r["name"] == "AR"]
    ref = copy.deepcopy(doc)
    ref["name"] = doc["name"] + "-reference-cost"
    ref["drafters"]["eagle3"] = dict(NGRAM_COST)
    ref["runs"] = [{"name": "AR", "mode": "ar"},
                   {"name": "oracle-combine-reference", "mode": "sd",
                    "policy": {"name": "oracle-combine", "costs": "reference"}},
                   {"name": "oracle-combine-reference-exact", "mode": "sd",
                    "policy": {"name": "oracle-combine", "plan": "min-steps"}}]
    return [doc, ref]


def run_combine_study(out: str | Path, study: CombineStudy | None = None) -> dict[str, Any]:
    """Sweep datasets x batch sizes; write combine_speedup.csv, summary.json and a plot per dataset."""
    study = study or CombineStudy()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    bundles = import_reference(study, out)
    rows = []
    for ds, path in bundles.items():
        for batch in study.batch_sizes:
            for cfg in _configs(study, path, batch):
                res = run_experiment(cfg)
                ar = res.summary["AR"]["throughput_tok_s"]
                tpot = res.requests.pivot_table(index="request_id", columns="run", values="tpot")
                for name, s in res.summary.items():
                    if name == "AR" and cfg["name"].endswith("reference-cost"):
                        continue
                    usage = s.get("extras", {}).get("drafter_usage", {})
                    rows.append({"dataset": ds, "batch": batch, "run": name,
                                 "costs": "reference" if cfg["name"].endswith("reference-cost") else "honest",
                                 "oracle": ("exact" if name.endswith("-exact") else "greedy")
                                 if name.startswith("oracle") else None,
                                 "decode_steps": int(res.requests.loc[res.requests["run"] == name, "decode_steps"].sum()),
                                 "throughput_tok_s": s["throughput_tok_s"], "speedup": s["throughput_tok_s"] / ar,
                                 "tpot_speedup": float((tpot["AR"] / tpot[name]).mean()) if "AR" in tpot else None,
                                 "mean_acceptance_length": s.get("mean_acceptance_length"),
                                 "tpot_mean": s.get("tpot_mean"),
                                 "eagle3_steps": usage.get("eagle3", 0), "ngram_steps": usage.get("ngram", 0),
                                 "plain_steps": usage.get("none", 0)})
    df = pd.DataFrame(rows)
    _write_csv(df, out / "combine_speedup.csv")
    summary = {ds: {metric: {run: {str(int(b)): round(float(v), 3) for b, v in g.set_index("batch")[metric].items()}
                             for run, g in df[df["dataset"] == ds].groupby("run")}
                    for metric in ("speedup", "tpot_speedup", "decode_steps")}
               for ds in bundles}
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True))
    for ds in bundles:
        sub = df[df["dataset"] == ds]

        for metric, label in (("speedup", "throughput speedup over AR"), ("tpot_speedup", "per-request TPOT speedup")):
            def draw(ax, sub=sub, ds=ds, metric=metric, label=label):
                for run, g in sub.groupby("run"):
                    style = (":" if run.endswith("-exact") else "--") if run.startswith("oracle") else "-"
                    ax.plot(g["batch"], g[metric], style, marker="o", label=run)
                ax.set_xscale("log", base=2)
                ax.axhline(1.0, color="grey", lw=0.8)
                ax.set_xlabel("batch size (closed-loop clients)")
                ax.set_ylabel(label)
                ax.set_title(f"n-gram / EAGLE-3 combination, {ds}")

            _plot(out / f"combine_{ds}{'' if metric == 'speedup' else '_tpot'}.png", draw)
    return summary
