"""A calibration data package that is not installed (flexeval for the chat prompts) is one error line naming
the pip command, not a traceback; so is a CUDA device that this torch cannot use."""
from __future__ import annotations

from experiments.cli import main


def test_missing_prompt_package_is_a_clear_cli_error(tmp_path, monkeypatch, capsys):
    import calibration.vllm_steps.targets as targets
    from calibration.prompts import _data_file

    def no_flexeval(*args, **kwargs):  # the chat prompts' data file, from a package that is not installed
        return _data_file("draftsim_no_such_flexeval", "flexeval==0.18.3", "core/x.jsonl")

    monkeypatch.setattr(targets, "vllm_target", no_flexeval)
    assert main(["calibrate", "vllm", "--out", str(tmp_path / "o"), "--analyse-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftsim: error: ") and "pip install --no-deps flexeval==0.18.3" in err
    assert "Traceback" not in err


def test_a_cuda_device_without_cuda_is_a_clear_cli_error(tmp_path, capsys):
    import pytest

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["calibrate", "latency", "--target", "smollm2-135m-instruct", "--drafters=", "--device", "cuda",
                 "--out-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("draftsim: error: device 'cuda': no CUDA device here") and "Traceback" not in err
    assert not (tmp_path / "o").exists()
