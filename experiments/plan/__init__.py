"""The capacity planner (`draftsim plan`).

    config.py   the plan config: traffic, SLO, search, candidate space, prices (validated whole)
    planner.py  the orchestration: candidates -> traffic -> searches -> plan.json (serial, pool or Ray)
    candidates.py  the candidate grid: each deployment's experiment config, placement and fit, price, bounds
    traffic.py  the workload a candidate is tried at (a rate -> arrivals) and the run sizes
    point.py    one simulation: a candidate at one rate and seed (early stop) or its saturated probe
    point_config.py  a point's typed config: its candidate's validated once per process, the workload and seed set
    search.py   the rate search per candidate: steady-state runs sized from the SLO quantile, intervals
    search_runs.py  the rounds on the sweep runner: probes, the search scope, crossovers, curve points
    counts.py   where a plan's simulations go, per stage (printed under the table, not in plan.json)
    result.py   plan.json: each candidate's entry, the ranking, the answer, the rules
    assumptions.py  what the answer rests on (measured, borrowed, modelled)
    deploy.py   what vLLM runs for a simulated mode (vLLM 0.32.0's speculative-config rules) or why not (research)
    draft_gpu.py  drafter profiles priced on the candidate's GPU (roofline ratio of the datasheets) or refused
    report.py   the ranked table, the answer's `vllm serve` line, assumptions; curves.png and the Pareto plots
    prices.py   $/GPU-hour from the sourced price table (overridable)
"""
