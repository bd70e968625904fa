"""The engine: the step rules and the SimPy driver that advances a server by them (docs/architecture.md).

rules/ (each step rule, plain Python over arrays), compiled_kernel.py + compiled_psd_kernel.py (the SD/AR and PSD
step loops over those rules, compiled by numba) + kernel_records.py (the named records they take), compiled_run.py
(a server's whole run in kernel calls) + compiled_replica.py (a cluster replica's: a call per routing);
server.py (the SimPy process), simulation.py (ServerSimulation: one server in its own Environment), scheduler.py
(the scheduler variants and a server's settings), kv_pool.py, request_state.py, arrivals.py, workload_arrays.py +
acceptance_table.py (the run's inputs as arrays), drafting.py (the policy's checks; a Python policy's choices),
pricing.py (the target profile and draft costs), records.py (table schemas and the step log).
"""
