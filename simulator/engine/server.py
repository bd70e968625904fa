"""One simulated server as a SimPy process: pull arrivals, plan a step, let time pass, apply it.

A `Server` lives in a `simpy.Environment` it is given, so several servers (replicas behind a router)
can share one; with `PushedArrivals` (a cluster's `ReplicaArrivals`) requests are handed to it at run
time. `ServerSimulation` (simulator/engine/simulation.py) is the one-server convenience wrapper.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import simpy

from simulator.engine.arrivals import PushedArrivals, arrivals_for
from simulator.engine.drafting import Drafting
from simulator.engine.kv_pool import BlockPool
from simulator.engine.pricing import Pricing
from simulator.engine.records import REQUEST_COLUMNS, StepLog
from simulator.engine.request_state import RequestState
from simulator.engine.rules.kv import lookahead_slots
from simulator.engine.scheduler import Scheduler, scheduler_variant
from simulator.server_config import Scenario
from simulator.engine import compiled_run
from simulator.engine.compiled_replica import CompiledReplica
from simulator.engine.workload_arrays import SimInputs

@dataclass
class SimResult:
    """Everything one simulated server produced."""

    requests: pd.DataFrame
    steps: pd.DataFrame
    itl: np.ndarray  # gap between consecutive emissions of a request, one per decode step it took part in
    extras: dict[str, Any] = field(default_factory=dict)


class Server:
    """One server running one scenario (mode, policy, costs) over the simulation's inputs, as a process in `env`.

    Reads its settings from `scenario.server` (a `ServerConfig`), as vLLM's scheduler reads `scheduler_config`.
    """

    def __init__(self, env: simpy.Environment, scenario: Scenario, inputs: SimInputs, *, live: bool = False,
                 on_step: Callable[[int], None] | None = None, arrivals: PushedArrivals | None = None):
        if not scenario.fits:
            raise ValueError(f"run {scenario.name!r}: {scenario.info.get('does_not_fit', 'deployment does not fit')}")
        cfg, workload, table = scenario.server, inputs.workload, inputs.table
        self.env, self.scenario, self.wl, self.table, self.mode = env, scenario, workload, table, scenario.mode
        self.on_step = on_step
        self.max_num_seqs = scenario.psd.concurrency(cfg.max_num_seqs) if self.mode == "psd" else cfg.max_num_seqs
        self.state = st = RequestState(workload, len(table.drafters), self.max_num_seqs)
        pool = BlockPool(scenario.kv_capacity_tokens // cfg.block_size, cfg.block_size)
        self.drafting = Drafting(scenario.policy, self.mode, table, workload, verification=cfg.verification,
                                 rng=scenario.seeds.verification_rng(), traces=inputs.traces, live=live)
        self.sched = Scheduler(workload, pool, max_num_batched_tokens=cfg.max_num_batched_tokens,
                               chunked=cfg.chunked_prefill, prefill=cfg.prefill, rules=cfg.scheduler,
                               lookahead=self._lookahead(inputs))
        # vLLM V1 (vllm/v1/engine/core.py run_busy_loop: _process_input_queue() then step() = schedule(),
        # execute, update_from_output(), outputs out): the gap between busy steps falls after a step's tokens are
        # out and before the input queue is read, so arrivals during it join the next step (rules/engine_loop.py).
        self.gap_s = cfg.step_overhead_s if scheduler_variant(cfg.scheduler).engine_loop_gap else 0.0
        self.async_scheduling = cfg.async_scheduling  # the gap overlaps the step before it (rules/engine_loop)
        self.pricing = Pricing(scenario.target, scenario.draft_costs, cfg.step_overhead_s - self.gap_s,
                               scenario.switch_cost_s, tree_passes=None if self.drafting.tree is None
                               else tuple(int(c) for c in self.drafting.tree.draft_pass_tokens()),
                               proposers=self._proposers(scenario.draft_costs, table.drafters))
        if self.mode == "psd" and self.pricing.proposers:
            raise ValueError(f"run {scenario.name!r}: engine_step draft costs (vLLM V1's proposer: drafters "
                             f"{list(self.pricing.proposers)}) price sequential SD steps; PSD drafts on its own "
                             "device: use whole_proposal or autoregressive")
        self._check_drafters()
        self.sched.check_fits(0 if self.mode == "ar" else self.drafting.stated_max_k(), cfg.max_model_len)
        self.log = StepLog()
        if arrivals is not None:
            if not getattr(arrivals, "routed", False):
                raise TypeError(f"run {scenario.name!r}: arrivals={type(arrivals).__name__}: expected a PushedArrivals "
                                "(requests pushed at run time; simulator/engine/arrivals.py) or a cluster's "
                                "ReplicaArrivals")
            arrivals.attach(st.arrival)
        self.arrivals = arrivals if arrivals is not None else arrivals_for(workload, st.arrival)
        why = compiled_run.refusal(self)
        if why is not None:
            raise ValueError(f"run {scenario.name!r}: {why}")
        self.compiled = compiled_run.for_server(self, CompiledReplica)
        self.process = env.process(self.loop())

    def loop(self):
        """The server: the whole run in one compiled loop (simulator/engine/compiled_run.py), or, a cluster
        replica, its steps up to each routing (simulator/engine/compiled_replica.py)."""
        if self.compiled.stepwise:
            yield from self.compiled.loop()
            return
        end = self.compiled.run(**self._compiled_checks())
        yield self.env.timeout(max(0.0, end - self.env.now))

    @property
    def clock(self) -> float:
        """The time this server's state is complete up to: the compiled kernel's clock while a compiled run is
        stepping (the SimPy clock stands still there), else the Environment's."""
        c = self.compiled
        return c.now if c.running else float(self.env.now)

    def _compiled_checks(self) -> dict:
        """How a compiled run tells the step hook: a hook with a `next_check` (simulator/measure/early_stop.py
        StopMonitor) is asked after the step that reaches each finish count it names, and ends the run when it answers
        true; any other hook is told once, at the end."""
        hook = self.on_step
        if hook is None or not hasattr(hook, "next_check"):
            return {}
        return {"stop": lambda finished: bool(hook(finished)), "next_check": lambda: int(hook.next_check)}

    def _idle(self):
        """The event an idle server waits for: its next known arrival, or a push (a replica's arrival source)."""
        nxt = self.arrivals.next_time()
        if nxt is not None:
            return self.env.timeout(max(0.0, nxt - self.env.now))
        ev = self.arrivals.wakeup()
        if ev is None:
            raise RuntimeError("engine stalled: requests left but none running, waiting or arriving")
        return ev

    def _lookahead(self, inputs: SimInputs) -> int:
        """vLLM V1's lookahead KV slots per running request (rules/kv.lookahead_slots) for an SD run: the policy's
        largest k when one of its drafters is of a kind whose proposer keeps KV. PSD keeps MineDraft's own KV rule
        (psd.defer_kv), AR drafts nothing."""
        if self.mode != "sd":
            return 0
        kinds = [inputs.drafter_kinds.get(d, "") for d in self.drafting.policy.drafters_used()]
        return lookahead_slots(kinds, self.drafting.stated_max_k(), self.scenario.server.scheduler)

    def _proposers(self, costs, drafters: tuple[str, ...]) -> tuple[str, ...]:
        """The policy's drafters whose cost is `engine_step` (vLLM V1's proposer), in drafter order; a drafter the
        policy never drafts with is not deployed, so its proposer never runs."""
        used = self.drafting.policy.drafters_used() if self.mode != "ar" else ()
        return tuple(d for d in drafters if d in used and d in costs and costs[d].kind == "engine_step")

    def _check_drafters(self) -> None:
        """Each of the policy's drafters (`Policy.drafters_used`) named once, in the traces and priced; else a
        ValueError naming the run, the policy and the drafter."""
        if self.mode == "ar":
            return
        used = self.drafting.policy.drafters_used()
        name = self.drafting.policy.name
        twice = sorted({d for d in used if used.count(d) > 1})
        if twice:
            raise ValueError(f"run {self.scenario.name!r}: policy {name!r} names drafter {twice[0]!r} more than once "
                             f"in drafters_used() ({list(used)}); each drafter once")
        for d in used:
            if d not in self.table.drafters:
                raise ValueError(f"run {self.scenario.name!r}: policy {name!r} uses drafter {d!r}, which the traces "
                                 f"do not have (have {list(self.table.drafters)})")
            self.pricing.cost_of(d)  # a clear error when the experiment's 'drafters:' gives it no cost
            if d not in self.table.acc_len:
                raise ValueError(f"run {self.scenario.name!r}: policy {name!r} drafts with {d!r}, but the inputs carry "
                                 "no acceptance for it (made with with_acceptance=False, as for AR runs only)")

    def requests_table(self) -> pd.DataFrame:
        """The requests table (REQUEST_COLUMNS) as it stands: what `result()` returns as `requests`."""
        if self.compiled.stepwise:
            self.compiled.settle()
        st, wl = self.state, self.wl
        decode_steps, proposed, accepted = st.verify_counts.totals()
        out = wl.output_len
        tpot = np.where(out > 1, (st.finish - st.first_token) / np.maximum(out - 1, 1), np.nan)
        req = {
            "request_id": np.asarray(wl.request_ids, dtype=object),
            "trace_id": np.asarray([self.table.trace_ids[t] for t in wl.trace_index], dtype=object),
            "category": np.asarray(wl.categories, dtype=object),
            "arrival_time": st.arrival,
            "prompt_len": wl.prompt_len.astype(np.int64),
            "output_len": out.astype(np.int64),
            "first_scheduled_time": st.first_sched,
            "first_token_time": st.first_token,
            "finish_time": st.finish,
            "ttft": st.first_token - st.arrival,
            "tpot": tpot,
            "e2e": st.finish - st.arrival,
            "queue_delay": st.first_sched - st.arrival,
            "decode_steps": decode_steps,
            "proposed_tokens": proposed,
            "accepted_tokens": accepted,
            "preemptions": st.preemptions,
            "sub_batch": st.sub_batch if self.mode == "psd" else np.full(len(wl), -1, dtype=np.int64),
        }
        return pd.DataFrame({c: req[c] for c in REQUEST_COLUMNS})

    def result(self) -> SimResult:
        requests = self.requests_table()
        st = self.state
        decode_steps = requests["decode_steps"].to_numpy()
        chunks = self.log.itl_chunks
        itl = (chunks[0] if len(chunks) == 1 else np.concatenate(chunks)) if chunks else np.zeros(0)
        usage = {d: int(st.usage[i]) for i, d in enumerate(self.table.drafters)}
        usage["none"] = int(st.usage[-1])
        pool = self.sched.pool
        extras = {
            "kv_total_blocks": pool.total_blocks,
            "kv_peak_blocks": pool.peak,
            "block_size": pool.block_size,
            "steps": self.log.step_no,
            "request_steps": int(decode_steps.sum()),
            "drafter_usage": usage,
            "psd_fallback_steps": self.log.psd_fallback_steps,
            "max_num_seqs": self.max_num_seqs,
            **self.scenario.info,
            "num_target_gpus": self.scenario.num_target_gpus,
            "num_draft_gpus": self.scenario.num_draft_gpus,
        }
        return SimResult(requests, self.log.steps.frame(), itl, extras)
