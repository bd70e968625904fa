"""vLLM step recording: a launcher for vLLM's CLI, a scheduler plugin that records every engine step,
and the code that turns the records into acceptance trace bundles and fitted latency profiles.

`launch` and `plugin` run under vLLM's interpreter; `records`, `acceptance` and `fit` are plain
Python that runs anywhere (they never import vLLM).
"""
