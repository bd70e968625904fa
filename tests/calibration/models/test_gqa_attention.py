"""The timing attention (calibration/models/gqa_attention.py) computes what transformers' own sdpa computes, for
every step a sweep times: a decode and a verify over a static cache, a tree verify under a 4-D mask, a prompt."""
import pytest

torch = pytest.importorskip("torch")

from calibration.latency_sweep import tree_attention, tree_parents  # noqa: E402
from calibration.models.gqa_attention import NAME, timed_attention  # noqa: E402
from calibration.models.kv_cache import cache_argument, random_static_cache, rewind  # noqa: E402


def _both(model, **inputs):
    """Logits under sdpa, then under the timing attention, of the same step (the cache rewound between)."""
    cache = random_static_cache(model, batch=inputs["input_ids"].shape[0], context=inputs.pop("context"),
                                room=inputs["input_ids"].shape[1], seed=11)
    kw = {cache_argument(model): cache}
    with torch.inference_mode():
        plain = model(**inputs, use_cache=True, **kw).logits
        rewind(cache, inputs["input_ids"].shape[1])
        with timed_attention(model):
            assert model.config._attn_implementation == NAME
            timed = model(**inputs, use_cache=True, **kw).logits
    assert model.config._attn_implementation != NAME  # restored
    return plain, timed


@pytest.mark.parametrize("query", [1, 3])
def test_decode_and_verify_match_sdpa(tiny_llama, query):
    assert tiny_llama.config.num_attention_heads == 2 * tiny_llama.config.num_key_value_heads  # two heads per group
    ids = torch.randint(0, 300, (3, query), generator=torch.Generator().manual_seed(query))
    pos = torch.arange(20, 20 + query).unsqueeze(0).expand(3, -1)
    plain, timed = _both(tiny_llama, input_ids=ids, position_ids=pos, context=20)
    torch.testing.assert_close(timed, plain, atol=1e-5, rtol=1e-5)


def test_a_tree_verify_matches_sdpa(tiny_llama):
    q, context = 7, 16
    mask, pos = tree_attention(tree_parents(q), context, 2, torch.float32, "cpu")
    ids = torch.randint(0, 300, (2, q), generator=torch.Generator().manual_seed(5))
    plain, timed = _both(tiny_llama, input_ids=ids, position_ids=pos, attention_mask=mask, context=context)
    torch.testing.assert_close(timed, plain, atol=1e-5, rtol=1e-5)


def test_a_prompt_over_no_cache_matches_sdpa(tiny_llama):
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        plain = tiny_llama(input_ids=ids).logits
        with timed_attention(tiny_llama):
            timed = tiny_llama(input_ids=ids).logits
    torch.testing.assert_close(timed, plain, atol=1e-5, rtol=1e-5)
