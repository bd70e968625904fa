"""Live runs: the same modes and policies on real models, measured and compared with the simulator.

One runner, `draftsim calibrate live`; batch 1 is a setting of it (`--max-num-seqs 1 --clients 1`).

    batched.py, batched_kv.py, batched_profile.py  the live server (continuous batching, per-sequence KV) and
                                                   its latency profiles, measured with the forward it serves with
    draft_engine.py                                its drafting side (model drafters with per-sequence KV, n-gram)
    runner.py, psd_workers.py                      the runner: AR, SD, SD on both devices, PSD (drafter process),
                                                   policies; profiles measured or supplied; the simulator's prediction
    records.py                                     live records, metrics and the trace measured on the AR outputs
The report (JSON + Markdown) is experiments/studies/live_batched_report.py (it adds oracle's pipeline bound).
"""
