"""Real models and drafters (transformers + torch), loaded in one place. The ground floor of calibration/: it
imports no other calibration module (tests/test_layering.py).

    loading.py                    load a target and build its drafters from specs (every command uses it)
    packaged.py                   models that PyPI packages ship (GGUF), found and converted once
    hf_backend.py                 the transformers backend
    drafters.py, ngram.py, generation.py  drafters and greedy generation
    drafter_folder.py             a layer-truncated drafter saved as a folder vLLM loads (`draft_model`)
    kv_cache.py, gqa_attention.py  the KV cache and attention a timed step runs over (latency sweeps, gpu_profile)
"""
