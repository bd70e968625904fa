"""Real models and drafters (transformers + torch; vLLM where installed), loaded in one place.

    loading.py                    load a target and build its drafters from specs (every command uses it)
    packaged.py                   models that PyPI packages ship (GGUF), found and converted once
    hf_backend.py, vllm_backend.py  the backends
    drafters.py, draft_engine.py, ngram.py, generation.py  drafters and greedy generation
    kv_cache.py, gqa_attention.py  the KV cache and attention a timed step runs over (latency sweeps, gpu_profile)
"""
