"""Run an experiment: load traces, build the workload, simulate every run, summarise and write results.

Callable from Python (a notebook) as well as from `draftsim run`:

    from experiments.run import run_experiment
    res = run_experiment("default", overrides=["workload.arrival.rate=12"], out=None)
    res.summary["eagle3-k3"]["throughput_tok_s"], res.requests, res.steps
"""
from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from pydantic import ValidationError

from experiments.config import ExperimentConfig, load_config
from policies.registry import make_policy
from simulator.acceptance_table import AcceptanceTable
from simulator.engine import ServerSimulation, SimResult
from simulator.metrics import summarize
from simulator.server_config import RunSpec, ServerConfig, build_draft_costs
from simulator.workload_arrays import EngineWorkload
from traces.bundle import TraceBundle, load_bundle
from traces.workload import Workload, WorkloadSpec, workload_and_bundle


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
    generated source: `{pool: PoolSpec fields}` or `{specbench: {file, on_mismatch, dataset, prompt_lookup}}`."""
    if isinstance(ref, dict):
        (kind, params), = ref.items()
        return _generated_bundle(kind, dict(params or {}), seed)
    if ref.startswith("builtin:"):
        name = ref.split(":", 1)[1]
        if name == "default":
            from traces.default_bundle import default_bundle_path

            return load_bundle(default_bundle_path())
        from traces.builtin_bundles import builtin_bundle_path

        return load_bundle(builtin_bundle_path(name))
    return load_bundle(ref)


def _generated_bundle(kind: str, params: dict[str, Any], seed: int) -> TraceBundle:
    if kind == "pool":
        from traces.pool import PoolSpec, make_pool_bundle

        fields = set(PoolSpec.__dataclass_fields__)
        unknown = set(params) - fields
        if unknown:
            raise ValueError(f"traces.pool: unknown key(s) {sorted(unknown)}; expected some of {sorted(fields)}")
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
        params.setdefault("seed", seed)
        spec = PoolSpec(**params)
        spec.validate()
        return make_pool_bundle(spec)
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


def engine_workload(workload: Workload, bundle: TraceBundle) -> tuple[EngineWorkload, list]:
    """Arrays the engine needs, plus the traces in AcceptanceTable order."""
    traces = bundle.requests
    index = {r.id: i for i, r in enumerate(traces)}
    reqs = workload.requests
    missing = [r.trace_id for r in reqs if r.trace_id not in index]
    if missing:
        raise ValueError(f"workload replays trace ids not in the bundle: {missing[:5]}")
    closed = workload.closed_loop
    ew = EngineWorkload(
        request_ids=[r.request_id for r in reqs],
        trace_index=np.array([index[r.trace_id] for r in reqs], dtype=np.int64),
        arrival=np.array([r.arrival_time if r.arrival_time is not None else 0.0 for r in reqs], dtype=np.float64),
        prompt_len=np.array([r.prompt_len for r in reqs], dtype=np.int64),
        output_len=np.array([r.output_len for r in reqs], dtype=np.int64),
        categories=[r.category or "" for r in reqs],
        closed_loop_clients=closed.clients if closed else 0,
        think_time=closed.think_time if closed else 0.0,
    )
    return ew, traces


def server_for(cfg: ExperimentConfig, run: RunSpec) -> ServerConfig:
    """The experiment's server with the run's overrides applied, validated."""
    if not run.server:
        return cfg.server
    doc = cfg.server.model_dump()
    doc.update(run.server)
    try:
        return ServerConfig.model_validate(doc)
    except Exception as e:
        raise ValueError(f"runs[{run.name}].server: {e}") from None


def kv_capacity(server: ServerConfig, run: RunSpec) -> tuple[int, dict[str, Any]]:
    """KV tokens the server holds: given directly, or from the catalogs via the deployment."""
    if server.kv_capacity_tokens is not None:
        return server.kv_capacity_tokens, {}
    from simulator.placement import kv_capacity_tokens

    placement = kv_capacity_tokens(server.deployment, where=f"runs[{run.name}] server.deployment")
    if not placement.fits:
        return 0, {"does_not_fit": placement.message, "placement": placement.summary()}
    return int(placement.kv_capacity_tokens), {"placement": placement.summary()}


def simulate_run(cfg: ExperimentConfig, run: RunSpec, bundle: TraceBundle, ew: EngineWorkload, traces: list,
                 seed: int, on_step: Callable[[int], None] | None = None) -> SimResult | dict[str, Any]:
    """Simulate one run; a deployment that does not fit is returned as a result dict, not raised."""
    server = server_for(cfg, run)
    cap, info = kv_capacity(server, run)
    if cap == 0:
        return info
    drafters = tuple(bundle.drafter_names)
    table = AcceptanceTable.from_traces(traces, drafters)
    policy = make_policy(run.policy, where=f"runs[{run.name}].policy") if run.mode != "ar" else None
    sim = ServerSimulation(
        run=run, target=server.target(), workload=ew, table=table, draft_costs=build_draft_costs(cfg.drafters),
        policy=policy, kv_capacity_tokens=cap, max_num_seqs=server.max_num_seqs,
        max_num_batched_tokens=server.max_num_batched_tokens, block_size=server.block_size,
        step_overhead_s=server.step_overhead_s, chunked_prefill=server.chunked_prefill,
        temperature=server.temperature, seed=seed, traces=traces, on_step=on_step,
    )
    res = sim.simulate()
    res.extras.update(info)
    res.extras["num_target_gpus"] = server.num_target_gpus
    res.extras["num_draft_gpus"] = server.num_draft_gpus if run.mode != "psd" else max(1, server.num_draft_gpus)
    return res


def run_experiment(config: Any, overrides: list[str] | tuple[str, ...] = (), seed: int | None = None,
                   out: str | Path | None = None, progress: bool = False, console=None) -> Results:
    """Validate the config, simulate every run, summarise; write the results folder when `out` is given."""
    cfg = load_config(config, overrides, seed)
    bundle = resolve_bundle(cfg.traces, cfg.seed)
    try:
        spec = WorkloadSpec.model_validate(cfg.workload)
    except ValidationError as e:
        raise ValueError("workload: " + "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())) from None
    workload, bundle = workload_and_bundle(bundle, spec, seed=cfg.seed)
    ew, traces = engine_workload(workload, bundle)
    seeds = np.random.SeedSequence(cfg.seed).spawn(len(cfg.runs))
    summary: dict[str, dict[str, Any]] = {}
    extras: dict[str, dict[str, Any]] = {}
    req_frames, step_frames, itl = [], [], {}
    tables: dict[str, tuple[pd.DataFrame | None, pd.DataFrame | None, dict[str, Any]]] = {}
    with _progress(progress, console) as bar:
        for run, ss in zip(cfg.runs, seeds):
            task = bar.add_task(run.name, total=len(ew)) if bar else None
            on_step = _throttled(bar, task, len(ew)) if bar else None
            res = simulate_run(cfg, run, bundle, ew, traces, int(ss.generate_state(1)[0]), on_step)
            if isinstance(res, dict):
                summary[run.name] = {"fits": False, **res}
                extras[run.name] = res
                tables[run.name] = (None, None, summary[run.name])
                continue
            if bar:
                bar.update(task, completed=len(ew))
            s = summarize(res.requests, res.steps, res.itl, slo=cfg.slo.model_dump(),
                          num_target_gpus=res.extras["num_target_gpus"], num_draft_gpus=res.extras["num_draft_gpus"],
                          extras=res.extras)
            s["fits"] = True
            s["extras"] = res.extras
            summary[run.name] = s
            extras[run.name] = res.extras
            req_frames.append(res.requests.assign(run=run.name))
            step_frames.append(res.steps.assign(run=run.name))
            itl[run.name] = res.itl
            tables[run.name] = (res.requests, res.steps, s)
    requests = pd.concat(req_frames, ignore_index=True) if req_frames else pd.DataFrame()
    steps = pd.concat(step_frames, ignore_index=True) if step_frames else pd.DataFrame()
    results = Results(cfg, summary, requests, steps, extras, itl)
    if out is not None:
        from experiments.report import write_results_folder

        results.out_dir = write_results_folder(out, config_dict=cfg.model_dump(mode="json"), runs=tables,
                                               timeline_max_steps=cfg.timeline_max_steps)
    return results


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _progress(enabled: bool, console):
    if not enabled:
        return _NoBar()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description:<18}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("requests"), TimeElapsedColumn(), console=console, transient=False)


def _throttled(bar, task, total: int) -> Callable[[int], None]:
    """Progress callback that redraws at most ~100 times per run (the step loop is hot)."""
    every = max(1, total // 100)
    state = {"next": every}

    def on_step(finished: int) -> None:
        if finished >= state["next"]:
            bar.update(task, completed=finished)
            state["next"] = finished + every

    return on_step
