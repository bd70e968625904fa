"""Run an experiment: config -> scenarios and inputs (simulator/scenario.py) -> simulate -> summarise -> write.

Callable from Python (a notebook) as well as from `draftsim run`:

    from experiments.run import run_experiment
    res = run_experiment("default", overrides=["workload.arrival.rate=12"], out=None)
    res.summary["eagle3-k3"]["throughput_tok_s"], res.requests, res.steps
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


import oracle.registry  # noqa: F401  (registers the ground-truth policies)
from experiments.config import ExperimentConfig, load_config
from experiments.provenance import run_provenance
from simulator.cluster.simulation import ClusterResult
from simulator.engine.simulation import SimResult
from simulator.measure.metrics import summarize
from simulator.engine.records import stack_tables
from simulator.scenario import ClusterScenario, Scenario, SimInputs, check_inputs, inputs_for, prepare_runs, simulate
from simulator.seeds import ExperimentSeeds
from traces.bundle import BundleMeta, TraceBundle
from traces.source import load_source
from traces.workload import workload_and_bundle


@dataclass
class Results:
    """What a run returns: the summary per run and the per-request / per-step tables of all runs."""

    config: ExperimentConfig
    summary: dict[str, dict[str, Any]]
    requests: pd.DataFrame
    steps: pd.DataFrame
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    itl: dict[str, np.ndarray] = field(default_factory=dict)
    out_dir: Path | None = None


def resolve_bundle(ref: Any, seed: int = 0) -> TraceBundle:
    """The bundle a config's `traces:` names: its parsed source (traces/source.py) or the document (`builtin:NAME`,
    a bundle folder, `{pool: ...}`, `{synthetic: ...}`, `{specbench: ...}`, `{acceptance: ...}`), generated ones
    drawn from `seed`."""
    return load_source(ref, seed)


def prepare(cfg: ExperimentConfig) -> list[Scenario | ClusterScenario]:
    """Every run of the config resolved and validated, policies built and seeded, before any simulates."""
    return prepare_runs(cfg.server, cfg.runs, cfg.drafters, cfg.seed, cluster=cfg.cluster)


def experiment_inputs(cfg: ExperimentConfig, need_acceptance: bool = True) -> SimInputs:
    """The config's trace bundle and sampled workload as the engine's inputs (pool and workload each from their
    own child of the seed tree, simulator/seeds.py)."""
    return experiment_inputs_and_meta(cfg, need_acceptance)[0]


def experiment_inputs_and_meta(cfg: ExperimentConfig, need_acceptance: bool = True) -> tuple[SimInputs, BundleMeta]:
    """`experiment_inputs` and the replayed bundle's metadata (what the runs' provenance reads)."""
    seeds = ExperimentSeeds.of(cfg.seed)
    bundle = resolve_bundle(cfg.traces, seeds.pool)
    workload, bundle = workload_and_bundle(bundle, cfg.workload, seed=seeds.workload, need_acceptance=need_acceptance)
    return inputs_for(workload, bundle, with_acceptance=need_acceptance), bundle.meta


def summarize_run(res: SimResult, slo: dict[str, Any]) -> dict[str, Any]:
    """summary.json entry of one simulated run; a cluster adds `replicas`, one summary per replica."""
    s = summarize(res.requests, res.steps, res.itl, slo=slo, num_target_gpus=res.extras["num_target_gpus"],
                  num_draft_gpus=res.extras["num_draft_gpus"], extras=res.extras)
    s["fits"] = True
    s["extras"] = res.extras
    if isinstance(res, ClusterResult):
        s["replicas"] = res.replica_summaries(slo)
    return s


def run_experiment(config: Any, overrides: list[str] | tuple[str, ...] = (), seed: int | None = None,
                   out: str | Path | None = None, progress: bool = False, console=None,
                   plots: bool = True) -> Results:
    """Validate the config, simulate every run, summarise; write the results folder when `out` is given
    (without its plots/ when `plots` is False)."""
    cfg = load_config(config, overrides, seed)
    if cfg.sweep is not None:
        raise ValueError(f"config {cfg.name!r} has a sweep: block: run it point by point with "
                         "experiments.sweep (or `draftsim sweep`), not as one experiment")
    scenarios = prepare(cfg)  # a bad policy or server override in any run fails here, before any simulation
    inputs, meta = experiment_inputs_and_meta(cfg, need_acceptance=any(sc.mode != "ar" for sc in scenarios))
    for sc in scenarios:  # a router the workload cannot serve (a client key in an open loop) fails before any run
        check_inputs(sc, inputs)
    # what each run borrowed (experiments/provenance.py); an MTP k vLLM would refuse fails here, before any run
    provenances = {sc.name: run_provenance(sc, meta).to_dict() for sc in scenarios}
    n = len(inputs.workload)
    simulated: list[tuple[Scenario | ClusterScenario, SimResult | dict]] = []
    with _progress(progress, console) as bar:
        for sc in scenarios:
            task = bar.add_task(sc.name, total=n) if bar else None
            on_step = _Progress(bar, task, n) if bar else None
            res = simulate(sc, inputs, on_step=on_step)
            if bar and not isinstance(res, dict):
                bar.update(task, completed=n)
            simulated.append((sc, res))
    plotting = None
    if out is not None and plots and any(not isinstance(res, dict) for _, res in simulated):
        from experiments.report import plots_beside

        # a forked child loads matplotlib while the runs are summarized here, then draws (experiments/report.py)
        done = [(sc.name, res) for sc, res in simulated if not isinstance(res, dict)]
        plotting = plots_beside({name: res.requests for name, res in done}, {name: res.steps for name, res in done})
    try:
        summary: dict[str, dict[str, Any]] = {}
        extras: dict[str, dict[str, Any]] = {}
        req_frames, step_frames, itl = [], [], {}
        tables: dict[str, tuple[pd.DataFrame | None, pd.DataFrame | None, dict[str, Any]]] = {}
        for sc, res in simulated:
            provenance = provenances[sc.name]
            if isinstance(res, dict):
                summary[sc.name] = {"fits": False, **res, "provenance": provenance}
                extras[sc.name] = res
                tables[sc.name] = (None, None, summary[sc.name])
                continue
            s = summarize_run(res, cfg.slo.model_dump())
            s["provenance"] = provenance
            summary[sc.name] = s
            extras[sc.name] = res.extras
            req_frames.append(res.requests.assign(run=sc.name))
            step_frames.append(res.steps.assign(run=sc.name))
            itl[sc.name] = res.itl
            tables[sc.name] = (res.requests, res.steps, s)
        requests = stack_tables(req_frames) if req_frames else pd.DataFrame()
        steps = stack_tables(step_frames) if step_frames else pd.DataFrame()
        results = Results(cfg, summary, requests, steps, extras, itl)
        if out is not None:
            from experiments.report import write_results_folder

            results.out_dir = write_results_folder(out, config_dict=cfg.model_dump(mode="json"), runs=tables,
                                                   timeline_max_steps=cfg.timeline_max_steps, plots=plots,
                                                   plotting=plotting)
    except BaseException:
        if plotting is not None:
            plotting.job.stop()
        raise
    return results


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _progress(enabled: bool, console):
    if not enabled:
        return _NoBar()
    from experiments.progress import make_progress

    return make_progress(console, "requests", description_width=18)


class _Progress:
    """The progress bar's step hook: redraws at most ~100 times per run, and names the finish count of its next
    redraw (`next_check`), so a compiled run or a compiled cluster loop returns to it only then and never stops for
    it (simulator/engine/server.py `_compiled_checks`, simulator/cluster/compiled_cluster.py)."""

    def __init__(self, bar, task, total: int):
        self.bar, self.task = bar, task
        self.every = max(1, total // 100)
        self.next_check = self.every

    def __call__(self, finished: int) -> bool:
        if finished >= self.next_check:
            self.bar.update(self.task, completed=finished)
            self.next_check = finished + self.every
        return False
