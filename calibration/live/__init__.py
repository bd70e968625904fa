"""Live runs: the same modes and policies on real models, measured and compared with the simulator.

    batched.py, batched_kv.py, batched_profile.py  the live batched server (continuous batching, per-sequence KV)
    runner.py, psd_workers.py                      its runner: AR, SD, SD on both devices, PSD (drafter process)
    records.py                                     live records and metrics, shared by both paths
    batch_one.py, batch_one_decode.py, batch_one_report.py  the older batch-1 path (to go once the batched
                                                   runner at batch 1 reproduces its figures)
"""
