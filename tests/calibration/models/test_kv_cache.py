"""The timed step's KV cache (calibration/models/kv_cache.py): a static cache that holds the context, is written in
place by the step and rewound after it, under the cache argument this transformers version names."""
import pytest

torch = pytest.importorskip("torch")

from calibration.models.gqa_attention import timed_attention  # noqa: E402
from calibration.models.kv_cache import (KV_ALIGN, cache_argument, cache_slots, check_written,  # noqa: E402
                                         random_static_cache, rewind)


def test_the_step_reads_the_random_context_and_writes_only_its_own_slots(tiny_llama):
    cache = random_static_cache(tiny_llama, batch=2, context=12, room=3, seed=5)
    keys = cache.layers[0].keys.clone()
    assert keys.shape == (2, 2, KV_ALIGN, 16) and int(cache.get_seq_length()) == 12  # 15 slots, one whole block
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


def test_the_cache_length_is_whole_blocks():
    assert [cache_slots(n) for n in (1, 15, 16, 17, 4097, 4098)] == [16, 16, 16, 32, 4112, 4112]
    assert cache_slots(5, align=1) == 5


@pytest.mark.parametrize("query", [1, 3])
def test_the_block_padding_changes_no_step(tiny_llama, query):
    """The slots past the step are masked: the same step over an exactly sized cache gives the same logits, under
    transformers' own attention and under the timing attention."""
    ids = torch.randint(0, 300, (2, query), generator=torch.Generator().manual_seed(query))
    pos = torch.arange(21, 21 + query).unsqueeze(0).expand(2, -1)
    kw = cache_argument(tiny_llama)
    out = []
    for align in (1, KV_ALIGN):
        cache = random_static_cache(tiny_llama, batch=2, context=21, room=query, seed=3, align=align)
        assert cache.layers[0].keys.shape[2] == (21 + query if align == 1 else 32)
        with torch.inference_mode():
            plain = tiny_llama(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache}).logits
            rewind(cache, query)
            with timed_attention(tiny_llama):
                timed = tiny_llama(input_ids=ids, position_ids=pos, use_cache=True, **{kw: cache}).logits
        out += [plain, timed]
    for other in out[1:]:
        torch.testing.assert_close(other, out[0], atol=1e-5, rtol=1e-5)
