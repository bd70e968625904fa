"""Live two-device PSD: the drafter runs in its own process on its own device, the target in this one.

The drafter process (multiprocessing, spawn) is pinned to its own core with its own torch thread count
(CPU) and holds a `DraftEngine`; it talks to the target's process over a pipe. Each PSD step follows
MineDraft's two sub-batches, with the simulator's rules (simulator/engine/compiled_psd_kernel.py): while the target
verifies sub-batch V with the proposals drafted last step, the drafter drafts sub-batch D; both
finish, proposals swap, roles flip. One empty side makes the step plain SD (draft, then verify).
New requests join the side drafted next, a balance counter keeps the sides even. A drafter process
that dies or stops answering is detected (poll with timeout, liveness check) and raised as
`DrafterDied`; the process is always terminated in `close()`, also on Ctrl-C.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from calibration.live.draft_engine import DraftEngine, DraftItem, Proposal
from calibration.live.batched import BatchedServer, BatchStepRecord, Running
from simulator.engine.rules.psd_sides import join_side, next_verify_side


class DrafterDied(RuntimeError):
    """The drafter process exited or stopped answering; the message says how."""


@dataclass(frozen=True)
class DrafterSetup:
    """What the drafter process loads and where it runs. `loader` is an importable `module:function`
    returning (drafters dict, eos list) from `loader_args`; the default loads a packaged target's drafters."""

    loader_args: tuple = ()
    loader: str = "calibration.live.psd_workers:load_packaged_drafters"
    cores: tuple[int, ...] | None = (1,)  # CPU cores to pin to (None: leave affinity alone)
    threads: int = 1
    capacity: int = 1024
    reply_timeout_s: float = 300.0


def load_packaged_drafters(target: str, specs: tuple[str, ...], int8_kernels: bool = False) -> tuple[dict, list[int]]:
    """The drafter process's loader: the target's drafters from spec strings (calibration.models.loading) and its EOS
    ids; `int8_kernels`: the int8 drafter as torch's fbgemm copy (as the target's process drafts with it)."""
    from calibration.models.loading import load_target

    loaded = load_target(target, specs)
    if int8_kernels:
        from calibration.models.drafters import with_int8_kernels

        return with_int8_kernels(loaded.drafters, loaded.lm.model), loaded.eos
    return loaded.drafters, loaded.eos


def _resolve(path: str) -> Callable:
    import importlib

    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def pin(cores: tuple[int, ...] | None, threads: int) -> None:
    """This process on `cores` (CPU affinity) with `threads` torch threads."""
    import torch

    if cores is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))
    torch.set_num_threads(threads)


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent dies, however the parent ends (even SIGKILL)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def drafter_main(conn, setup: DrafterSetup, parent_pid: int) -> None:
    """The drafter process: load, answer prefill / draft / remove / sweep requests until 'stop' or until the
    parent is gone."""
    _die_with_parent()
    try:
        pin(setup.cores, setup.threads)
        drafters, eos = _resolve(setup.loader)(*setup.loader_args)
        engine = DraftEngine(drafters, eos, setup.capacity)
        conn.send(("ready", {"pid": os.getpid(), "drafters": list(engine.names),
                             "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}))
        while True:
            while not conn.poll(1.0):
                if os.getppid() != parent_pid:
                    return
            msg = conn.recv()
            op = msg[0]
            if op == "stop":
                return
            t0 = time.perf_counter()
            if op == "prefill":
                engine.prefill(msg[1], msg[2])
                conn.send(("done", time.perf_counter() - t0, None))
            elif op == "draft":
                got = engine.draft(msg[1], msg[2])
                payload = {rid: (p.tokens, None if p.q_rows is None else p.q_rows.numpy()) for rid, p in got.items()}
                conn.send(("done", time.perf_counter() - t0, payload))
            elif op == "remove":
                engine.remove(msg[1])
            elif op == "sweep":
                from calibration.live.batched_profile import measure_points

                conn.send(("done", time.perf_counter() - t0,
                           measure_points(engine.models[msg[1]], msg[2], query_tokens=(1,))))
            else:
                raise ValueError(f"drafter process: unknown request {op!r}")
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        return


class RemoteDrafts:
    """The draft side in another process: `submit` returns at once, `collect` waits for the proposals."""

    def __init__(self, setup: DrafterSetup):
        ctx = mp.get_context("spawn")
        self.setup = setup
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=drafter_main, args=(child, setup, os.getpid()), daemon=True, name="draftsim-drafter")
        self.process.start()
        child.close()
        self.busy_s = 0.0  # drafter-side seconds of the last reply
        self.info: dict[str, Any] = self._wait("ready")

    def _wait(self, kind: str = "done"):
        """The next reply; DrafterDied if the process exits or stays silent past the timeout."""
        deadline = time.monotonic() + self.setup.reply_timeout_s
        while True:
            try:
                if self.conn.poll(0.05):
                    msg = self.conn.recv()
                    break
            except (EOFError, OSError):
                raise DrafterDied(self._dead_text()) from None
            if not self.process.is_alive():
                raise DrafterDied(self._dead_text())
            if time.monotonic() > deadline:
                raise DrafterDied(f"drafter process {self.process.pid} sent no reply in {self.setup.reply_timeout_s} s")
        if msg[0] != kind:
            raise DrafterDied(f"drafter process {self.process.pid}: expected {kind!r}, got {msg[0]!r}")
        if kind == "ready":
            return msg[1]
        self.busy_s = float(msg[1])
        return msg[2]

    def _dead_text(self) -> str:
        self.process.join(timeout=1.0)
        return f"drafter process {self.process.pid} died (exit code {self.process.exitcode})"

    def _send(self, msg) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, EOFError, OSError):
            raise DrafterDied(self._dead_text()) from None

    def prefill(self, prompts: dict[str, list[int]], used: tuple[str, ...] | None = None) -> None:
        self._send(("prefill", prompts, used))
        self._wait()

    def remove(self, ids: list[str]) -> None:
        self._send(("remove", list(ids)))

    def submit(self, items: list[DraftItem], want_rows: bool) -> None:
        self._send(("draft", items, want_rows))

    def collect(self) -> dict[str, Proposal]:
        import torch

        got = self._wait()
        return {rid: Proposal(list(t), None if q is None else torch.from_numpy(q)) for rid, (t, q) in got.items()}

    def sweep(self, name: str, grid) -> list:
        self._send(("sweep", name, grid))
        return self._wait()

    def close(self) -> None:
        """Stop the process: ask, then terminate, then kill; never leaves it running."""
        p = self.process
        try:
            if p.is_alive():
                try:
                    self.conn.send(("stop",))
                except (BrokenPipeError, EOFError, OSError):
                    pass
                p.join(timeout=5.0)
        finally:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join()
            self.conn.close()


@dataclass
class PSDState:
    """The sub-batch verified this step, and how many steps fell back to plain SD."""

    verify_side: int = 0
    fallback_steps: int = 0
    failure: str | None = None
    step_hook: Callable[[Any], None] | None = field(default=None, repr=False)  # called with the server per step


class PSDServer(BatchedServer):
    """A BatchedServer whose decode steps are MineDraft two-sub-batch PSD steps with a remote draft side."""

    def __init__(self, *args, step_hook: Callable[[Any], None] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.psd = PSDState(step_hook=step_hook)

    def assign_side(self, r: Running) -> None:
        """Join a side by the simulator's rule (simulator/engine/rules/psd_sides.join_side): the side drafted next
        step unless it already has more; `r`, just appended to the running list, is on no side yet (-1)."""
        sides = [x.side for x in self.running]
        r.side = join_side(sides, range(len(sides)), len(sides), self.psd.verify_side)

    def psd_step(self) -> None:
        st, vs = self.psd, self.psd.verify_side
        dec = list(self.running)
        V = [r for r in dec if r.side == vs]
        D = [r for r in dec if r.side != vs]
        fallback = not V or not D
        if fallback:
            V, D = dec, []
            st.fallback_steps += 1
        v_new = [r for r in V if r.pending is None] if fallback else []
        t0 = self.now()
        choices = self.choose(v_new + D)
        ch_new, ch_d = choices[:len(v_new)], choices[len(v_new):]
        pre_items = self.draft_items(v_new, ch_new)
        got_new: dict[str, Proposal] = {}
        pre_draft = 0.0
        if pre_items:  # fallback: the verify side is drafted first, in sequence, as plain SD
            self.drafts.submit(pre_items, self.want_rows)
            got_new = self.drafts.collect()
            pre_draft = self.drafts.busy_s
        t1 = self.now()
        items_d = self.draft_items(D, ch_d)
        if items_d:
            self.drafts.submit(items_d, self.want_rows)
        new_choice = {r.req.id: c for r, c in zip(v_new, ch_new)}
        plan = []
        for r in V:
            if r.pending is not None:
                plan.append(r.pending)
            elif r.req.id in new_choice and new_choice[r.req.id][0] is not None:
                d, k = new_choice[r.req.id]
                plan.append((d, k, got_new.get(r.req.id)))
            else:
                plan.append((None, 0, None))
        done = self.verify(V, plan, pre_draft, t1)
        t2 = self.now()
        got_d = self.drafts.collect() if items_d else {}
        t3 = self.now()
        for r in V:
            r.pending = None
        for r, (d, k) in zip(D, ch_d):
            r.pending = (d, k, got_d[r.req.id]) if d is not None else None
        st.verify_side = next_verify_side(vs, len(V), len(D))
        self.steps.append(BatchStepRecord("psd-fallback" if fallback else "psd", t0, t3, len(V) + len(D),
                                          draft_s=pre_draft + (self.drafts.busy_s if items_d else 0.0),
                                          verify_s=t2 - t1, drafted_seqs=len(items_d) + len(pre_items),
                                          proposed=sum(s.proposed for s in done),
                                          accepted=sum(s.accepted for s in done), rows=done))
        if st.step_hook is not None:
            st.step_hook(self)

    def serve(self, step=None):
        try:
            return super().serve(step or self.psd_step)
        except DrafterDied as e:
            self.psd.failure = str(e)
            return [self.done[i] for i in sorted(self.done)]
