"""The capacity planner (`draftsim plan`).

    config.py   the plan config: traffic, SLO, search, candidate space, prices (validated whole)
    search.py   the rate search per candidate: steady-state runs sized from the SLO quantile, intervals
    planner.py  candidates -> fit check -> search -> cost -> plan.json (serial, pool or Ray)
    report.py   the ranked table, the chosen candidate's `vllm serve` line, curves.png and pareto.png
    prices.py   $/GPU-hour from the sourced price table (overridable)
"""
