"""Run an experiment: config -> scenarios and inputs (simulator/scenario.py) -> simulate -> summarise -> write.

Callable from Python (a notebook) as well as from `draftsim run`:

    from experiments.run import run_experiment
    res = run_experiment("default", overrides=["workload.arrival.rate=12"], out=None)
    res.summary["eagle3-k3"]["throughput_tok_s"], res.requests, res.steps
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
from traces.bundle import BundleMeta, TraceBundle, load_bundle_cached
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


def resolve_bundle(ref: "str | dict[str, dict[str, Any]]", seed: int = 0) -> TraceBundle:
    """The bundle a config names: `builtin:default`, `builtin:NAME` (shipped), a bundle folder, or a
    generated source: `{pool: PoolSpec fields}`, `{synthetic: SynthSpec fields}` or `{specbench: {file, on_mismatch, dataset, prompt_lookup}}`."""
    if isinstance(ref, dict):
        (kind, params), = ref.items()
        return _generated_bundle(kind, dict(params or {}), seed)
    from traces.builtin_bundles import bundle_folder

    return load_bundle_cached(bundle_folder(ref))


def _generated_bundle(kind: str, params: dict[str, Any], seed: int) -> TraceBundle:
    if kind == "synthetic":  # a synthetic-bundle spec inline (traces/synthetic/spec.py), drawn from the run's seed
        from traces.synthetic.spec import make_synthetic_bundle, parse_synth_spec

        return make_synthetic_bundle(parse_synth_spec(params, "traces.synthetic"), seed=seed)
    if kind == "pool":
        from traces.pool import PoolSpec, make_pool_bundle

        try:
            spec = PoolSpec.from_config(params, seed)
        except ValueError as e:
            raise ValueError(f"traces.{e}") from None
        return make_pool_bundle(spec)
    if kind == "acceptance":  # a base bundle's lengths, drafters' acceptance at a level (traces/acceptance_levels.py)
        from traces.acceptance_levels import resolve_levels

        return resolve_levels(resolve_bundle(params.get("base", "builtin:default"), seed), params.get("drafters"),
                              seed)
    from traces.importers.specbench import import_specbench
    from traces.prompt_lookup import with_prompt_lookup

    allowed = {"file", "on_mismatch", "dataset", "prompt_lookup"}
    unknown = set(params) - allowed
    if unknown or "file" not in params:
        raise ValueError(f"traces.specbench: expected keys {sorted(allowed)} with 'file' required, got {sorted(params)}")
    path = Path(params["file"])
    if not path.is_file():
        raise ValueError(f"traces.specbench.file: {path} not found (the SpecDecode-Bench reference traces live in "
                         f"../shared/reference-traces/ beside the repository; run from the repository root)")
    bundle, _ = import_specbench(path, on_mismatch=params.get("on_mismatch", "error"), dataset=params.get("dataset"))
    lookup = params.get("prompt_lookup")
    if lookup:
        bundle = with_prompt_lookup(bundle, int(lookup.get("min_n", 3)), int(lookup.get("max_n", 4)))
    return bundle


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
    summary: dict[str, dict[str, Any]] = {}
    extras: dict[str, dict[str, Any]] = {}
    req_frames, step_frames, itl = [], [], {}
    tables: dict[str, tuple[pd.DataFrame | None, pd.DataFrame | None, dict[str, Any]]] = {}
    with _progress(progress, console) as bar:
        for sc in scenarios:
            task = bar.add_task(sc.name, total=n) if bar else None
            on_step = _throttled(bar, task, n) if bar else None
            res = simulate(sc, inputs, on_step=on_step)
            provenance = provenances[sc.name]
            if isinstance(res, dict):
                summary[sc.name] = {"fits": False, **res, "provenance": provenance}
                extras[sc.name] = res
                tables[sc.name] = (None, None, summary[sc.name])
                continue
            if bar:
                bar.update(task, completed=n)
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
                                               timeline_max_steps=cfg.timeline_max_steps, plots=plots)
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


def _throttled(bar, task, total: int) -> Callable[[int], None]:
    """Progress callback that redraws at most ~100 times per run (the step loop is hot)."""
    every = max(1, total // 100)
    state = {"next": every}

    def on_step(finished: int) -> None:
        if finished >= state["next"]:
            bar.update(task, completed=finished)
            state["next"] = finished + every

    return on_step
