"""The timed step's KV cache (calibration/models/kv_cache.py): a static cache that holds the context, is written in
place by the step and rewound after it, under the cache argument this transformers version names."""
import pytest

torch = pytest.importorskip("torch")

from calibration.models.kv_cache import cache_argument, check_written, random_static_cache, rewind  # noqa: E402


def test_the_step_reads_the_random_context_and_writes_only_its_own_slots(tiny_llama):
    cache = random_static_cache(tiny_llama, batch=2, context=12, room=3, seed=5)
    keys = cache.layers[0].keys.clone()
    assert keys.shape == (2, 2, 15, 16) and int(cache.get_seq_length()) == 12
    assert keys[:, :, :12].abs().sum() > 0 and keys[:, :, 12:].abs().sum() == 0
    ids = torch.tensor([[7, 8, 9], [1, 2, 3]])
    pos = torch.arange(12, 15).unsqueeze(0).expand(2, -1)
    kw = cache_argument(tiny_llama)
    with torch.inference_mode():
        first = tiny_llama(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache}).logits
        check_written(cache, 15, "step")
        assert torch.equal(cache.layers[0].keys[:, :, :12], keys[:, :, :12])  # the context is left as it was
        rewind(cache, 3)
        assert int(cache.get_seq_length()) == 12
        again = tiny_llama(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache}).logits
        torch.testing.assert_close(first, again)  # the rewound step overwrites its own slots: same answer
        # the context is read: another random context gives other logits for the same query tokens
        other = random_static_cache(tiny_llama, batch=2, context=12, room=3, seed=6)
        moved = tiny_llama(input_ids=ids, position_ids=pos, use_cache=True, **{kw: other}).logits
    assert not torch.allclose(first, moved)


def test_a_cache_the_forward_did_not_write_is_caught(tiny_llama):
    cache = random_static_cache(tiny_llama, batch=1, context=4, room=1)
    with pytest.raises(RuntimeError, match="step: the KV cache holds 4 tokens, expected 5"):
        check_written(cache, 5, "step")  # what a forward that ignored its cache leaves behind


def test_the_cache_argument_is_named_from_the_signature():
    class Old:
        def forward(self, input_ids=None, past_key_values=None):
            pass

    class Neither:
        def forward(self, input_ids=None):
            pass

    assert cache_argument(Old()) == "past_key_values"
    with pytest.raises(TypeError, match="Neither.forward takes neither"):
        cache_argument(Neither())

