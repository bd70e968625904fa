"""Drafters: W8A8 int8 copy, first-N-layer copy, spec parsing."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from calibration.models.drafters import int8_copy, parse_drafter, truncated_copy  # noqa: E402
from calibration.models.generation import teacher_forced_logits, teacher_forced_logits_with_exits  # noqa: E402


def test_truncated_copy_equals_exit_from_target_pass(tiny_llama):
    prompt, output = [1, 5, 9, 33], [40, 41, 42, 7, 8]
    full, exits = teacher_forced_logits_with_exits(tiny_llama, prompt, output, [2, 4])
    assert torch.equal(exits[4], full)
    small = truncated_copy(tiny_llama, 2)
    assert len(small.model.layers) == 2
    assert torch.allclose(teacher_forced_logits(small, prompt, output), exits[2], atol=1e-5)
    assert not torch.allclose(exits[2], full)


def test_truncated_copy_shares_weights_and_checks_range(tiny_llama):
    small = truncated_copy(tiny_llama, 3)
    assert small.model.layers[0] is tiny_llama.model.layers[0]
    with pytest.raises(ValueError, match="out of range"):
        truncated_copy(tiny_llama, 5)


def test_int8_copy_is_position_independent_and_close(tiny_llama):
    q = int8_copy(tiny_llama)
    prompt, output = [3, 4, 5, 6], list(range(10, 30))
    whole = teacher_forced_logits(q, prompt, output)
    prefix = teacher_forced_logits(q, prompt, output[:8])
    assert torch.allclose(whole[:8], prefix, atol=1e-4)  # per-token scales: later tokens do not leak back
    ref = teacher_forced_logits(tiny_llama, prompt, output)
    assert not torch.equal(whole, ref)  # it really is quantized
    assert (whole - ref).abs().max() < 0.1 * ref.abs().max()


def test_int8_weights_are_int8(tiny_llama):
    q = int8_copy(tiny_llama)
    layer = q.model.layers[0].self_attn.q_proj
    assert layer.qweight.dtype == torch.int8
    assert int(layer.qweight.abs().max()) == 127  # per-channel scale maps each row's max to 127


class _FakeLM:
    def __init__(self, model):
        self.model = model
        self.device = "cpu"


@pytest.mark.parametrize("spec, message", [
    ("layers:x", "integer N"), ("ngram:1:2", "min_n:max_n:max_proposal"), ("ngram:a:b:c", "integers"),
    ("medusa", "unknown drafter"), ("model:/definitely/not/here", "config.json"),
])
def test_bad_drafter_specs(tiny_llama, spec, message):
    with pytest.raises(ValueError, match=message):
        parse_drafter(spec, _FakeLM(tiny_llama))


def test_ngram_spec_parameters(tiny_llama):
    d = parse_drafter("ngram:1:3:5", _FakeLM(tiny_llama))
    assert d.params == {"min_n": 1, "max_n": 3, "max_proposal": 5}


def test_int8_kernel_copy_uses_quantized_kernels(tiny_llama):
    from calibration.models.drafters import int8_kernel_copy

    q = int8_kernel_copy(tiny_llama)
    assert type(q.model.layers[0].mlp.up_proj).__module__.startswith("torch.ao.nn.quantized.dynamic")
    out = teacher_forced_logits(q, [1, 2, 3], [4, 5])
    assert out.shape == (2, 300) and torch.isfinite(out).all()
