"""Where a config's traces come from (`traces:`), parsed once into a typed source that loads its bundle.

A source is a bundle folder or `builtin:NAME` (`BundleRef`), or one generated source, a mapping with one key:
`pool` (traces/pool.py PoolSpec), `synthetic` (traces/synthetic/spec.py SynthSpec), `specbench` (a
SpecDecode-Bench file imported on the fly) or `acceptance` (a base source's lengths with drafters' acceptance at a
level, traces/acceptance_levels.py). Each dumps back to the document it was given (a string or that one-key
mapping, only the keys given, as written), so `--set`, sweeps and config hashes read the document given;
`bundle(seed)` loads or draws it, the generated ones from `seed` (the run's pool seed) unless they set their own.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BeforeValidator, ConfigDict, Field, InstanceOf, PrivateAttr, ValidationError, field_validator, \
    model_serializer, model_validator

from traces.acceptance_levels import DrafterLevel
from traces.bundle import TraceBundle
from traces.config_base import StrictModel, error_lines
from traces.errors import shorten
from traces.pool import PoolSpec
from traces.synthetic.spec import SynthSpec

DEFAULT_SOURCE = "builtin:default"


class _Generated(StrictModel):
    """A generated source: dumps as the one-key mapping it was parsed from (`parse_source` keeps it), so a config's
    dump, hash and sweep seeds stay what the document gave (200 stays 200, not 200.0); built in Python, as its
    fields dump without their defaults."""

    _doc: dict[str, Any] | None = PrivateAttr(None)

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any, info: Any) -> Any:
        if self._doc is not None:
            return copy.deepcopy(self._doc)
        return {name: getattr(self, name).model_dump(mode=info.mode, exclude_unset=True)
                for name in type(self).model_fields}


class BundleRef(StrictModel):
    """A bundle folder or `builtin:NAME` (traces/builtin_bundles.py); the folder must exist."""

    ref: str

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v: Any) -> Any:
        return {"ref": v} if isinstance(v, str) else v

    @field_validator("ref")
    @classmethod
    def _folder_exists(cls, v: str) -> str:
        from traces.builtin_bundles import bundle_folder

        if not bundle_folder(v).is_dir():
            raise ValueError(f"{v!r} is not a trace bundle folder (nor builtin:NAME)")
        return v

    @model_serializer
    def _as_text(self) -> str:
        return self.ref

    def bundle(self, seed: int = 0) -> TraceBundle:
        from traces.bundle import load_bundle_cached
        from traces.builtin_bundles import bundle_folder

        return load_bundle_cached(bundle_folder(self.ref))


class PoolSource(_Generated):
    """`{pool: {PoolSpec fields}}`: a seeded synthetic drafter pool (its seed: the run's unless given)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    pool: InstanceOf[PoolSpec]
    seed_given: bool = Field(False, description="the config set the pool's seed (else the run's pool seed)")

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, v: Any) -> Any:
        if not isinstance(v, dict) or set(v) != {"pool"} or isinstance(v["pool"], PoolSpec):
            return v
        params = v["pool"] if v["pool"] is not None else {}
        return {"pool": PoolSpec.from_config(params), "seed_given": isinstance(params, dict) and "seed" in params}

    @model_serializer(mode="wrap")
    def _as_given(self, handler: Any, info: Any) -> Any:
        if self._doc is not None:
            return copy.deepcopy(self._doc)
        return {"pool": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.pool).items()
                         if k != "seed" or self.seed_given}}

    def spec(self, seed: int = 0) -> PoolSpec:
        """The pool's PoolSpec, drawn from `seed` unless the config gave its own."""
        return self.pool if self.seed_given else replace(self.pool, seed=seed)

    def bundle(self, seed: int = 0) -> TraceBundle:
        from traces.pool import make_pool_bundle

        return make_pool_bundle(self.spec(seed))


class SynthSource(_Generated):
    """`{synthetic: SynthSpec fields}`: a bundle drawn from acceptance models and length distributions."""

    synthetic: SynthSpec

    def bundle(self, seed: int = 0) -> TraceBundle:
        from traces.synthetic.spec import make_synthetic_bundle

        return make_synthetic_bundle(self.synthetic, seed=seed)


class PromptLookup(StrictModel):
    """vLLM's n-gram proposer settings the imported n-gram drafter's proposals are recomputed with."""

    min_n: int = Field(3, ge=1)
    max_n: int = Field(4, ge=1)


class SpecbenchImport(StrictModel):
    """A SpecDecode-Bench trace file imported on the fly (traces/importers/specbench.py)."""

    file: str = Field(min_length=1)
    on_mismatch: str = "error"
    dataset: str | None = None
    prompt_lookup: PromptLookup | None = None

    @field_validator("on_mismatch")
    @classmethod
    def _known_policy(cls, v: str) -> str:
        from traces.importers.specbench import MISMATCH_POLICIES

        if v not in MISMATCH_POLICIES:
            raise ValueError(f"expected one of {MISMATCH_POLICIES}, got {v!r}")
        return v


class SpecbenchSource(_Generated):
    """`{specbench: {file, on_mismatch, dataset, prompt_lookup}}`; the file is read when the bundle is loaded."""

    specbench: SpecbenchImport

    def bundle(self, seed: int = 0) -> TraceBundle:
        from traces.importers.specbench import import_specbench
        from traces.prompt_lookup import with_prompt_lookup

        spec = self.specbench
        path = Path(spec.file)
        if not path.is_file():
            raise ValueError(f"traces.specbench.file: {path} not found (the SpecDecode-Bench reference traces live "
                             f"in ../shared/reference-traces/ beside the repository; run from the repository root)")
        bundle, _ = import_specbench(path, on_mismatch=spec.on_mismatch, dataset=spec.dataset)
        if spec.prompt_lookup is not None:
            bundle = with_prompt_lookup(bundle, spec.prompt_lookup.min_n, spec.prompt_lookup.max_n)
        return bundle


class AcceptanceLevels(StrictModel):
    """A base source and each drafter's acceptance at a level, typed (traces/acceptance_levels.py DrafterLevel);
    `resolve_levels` checks each entry against the base bundle when it is loaded."""

    base: "TraceSource" = Field(DEFAULT_SOURCE, validate_default=True)
    drafters: dict[str, DrafterLevel] = Field(min_length=1)


class AcceptanceSource(_Generated):
    """`{acceptance: {base, drafters}}`."""

    acceptance: AcceptanceLevels

    def bundle(self, seed: int = 0) -> TraceBundle:
        from traces.acceptance_levels import resolve_levels

        return resolve_levels(self.acceptance.base.bundle(seed), self.acceptance.drafters, seed)


SOURCES = {"bundle": BundleRef, "pool": PoolSource, "synthetic": SynthSource, "specbench": SpecbenchSource,
           "acceptance": AcceptanceSource}
AnySource = Union[BundleRef, PoolSource, SynthSource, SpecbenchSource, AcceptanceSource]


def source_kind(v: Any) -> str | None:
    """Which source a `traces:` value is: 'bundle' for a string, else its one generated key (None: neither)."""
    for kind, cls in SOURCES.items():
        if isinstance(v, cls) or (kind == "bundle" and isinstance(v, str)) or (isinstance(v, dict) and set(v) == {kind}):
            return kind
    return None


def parse_source(v: Any, where: str = "") -> AnySource:
    """A `traces:` value (a document, or an already parsed source) as its typed source. ValueError names the key
    below `where` (`pool: strong must be in (0, 1)`; with where="traces": `traces.pool: ...`)."""
    kind = source_kind(v)
    if kind is not None and not isinstance(v, (str, dict)):
        return v
    if kind is None:
        if isinstance(v, dict):
            msg = (f"a generated source is one of {{pool: ...}}, {{synthetic: ...}}, {{specbench: ...}} or "
                   f"{{acceptance: {{base, drafters}}}}, got keys {sorted(map(str, v))}")
        else:
            msg = f"expected a bundle folder, builtin:NAME or a generated source mapping, got {shorten(v)}"
        raise ValueError(f"{where}: {msg}" if where else msg)
    model = SOURCES[kind]
    try:
        source = model.model_validate(v)
    except ValidationError as e:
        loc, msg = error_lines(e, model=model)[0]
        key = ".".join(p for p in (where, "" if kind == "bundle" or loc == "(top level)" else loc) if p)
        raise ValueError(f"{key}: {msg}" if key else msg) from None
    if kind != "bundle":
        source._doc = copy.deepcopy(v)
    return source


TraceSource = Annotated[AnySource, BeforeValidator(parse_source)]
AcceptanceLevels.model_rebuild()


def load_source(v: Any, seed: int = 0) -> TraceBundle:
    """The bundle a `traces:` value names (a document is parsed first), generated ones drawn from `seed`."""
    return parse_source(v, "traces").bundle(seed)
