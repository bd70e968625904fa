"""The engine: the step rules and the SimPy driver that advances a server by them (docs/architecture.md).

simulation.py (ServerSimulation: one server in its own Environment), server.py (the SimPy process),
scheduler.py + kv_pool.py (admission, token budget, paged KV, preemption), request_state.py, arrivals.py,
workload_arrays.py + acceptance_table.py (the run's inputs as arrays), drafting.py (policy choices, acceptance
replay), pricing.py (a step's target and drafter costs), step.py / step_sd.py / step_psd.py (planning a step),
step_outcome.py (applying it), records.py (table schemas); compiled_run.py + compiled_replica.py +
compiled_kernel.py + compiled_psd_kernel.py + kernel_records.py (the compiled path for eligible runs and the named
records its kernels take).
"""
