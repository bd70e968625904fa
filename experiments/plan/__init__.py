"""The capacity planner (`draftsim plan`).

    config.py   the plan config: traffic, SLO, search, candidate space, prices (validated whole)
    search.py   the rate search per candidate: steady-state runs sized from the SLO quantile, intervals
    planner.py  candidates -> fit check -> search -> cost -> plan.json (serial, pool or Ray)
    deploy.py   what vLLM runs for a simulated mode (vLLM 0.32.0's speculative-config rules) or why not (research)
    draft_gpu.py  drafter profiles priced on the candidate's GPU (roofline ratio of the datasheets) or refused
    report.py   the ranked table, the answer's `vllm serve` line, assumptions; curves.png and the Pareto plots
    prices.py   $/GPU-hour from the sourced price table (overridable)
"""
