"""The built-in studies and their reports (each run through `draftsim run`/`sweep` and the scenario builder).

    psd_report.py, psd_plots.py     PSD vs SD and the PSD bounds: a report over a finished sweep
    bounds_sim.py                   `draftsim bounds --simulate`: the pipeline bounds measured by the engine
    bandit_report.py                drafter bandits: regret curves against the best fixed drafter
    combine_report.py               n-gram / EAGLE combination against the oracles
    live_batched_report.py          the live batched runs against the simulator (calibration/live/)
"""
