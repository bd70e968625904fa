"""Synthetic bundle specs: drafters, categories (weight, length distributions, acceptance models), and the
functions that fit a spec to measured bundles and draw a bundle from a spec."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Mapping, Union

import numpy as np
import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from traces.bundle import BundleMeta, DrafterSpec, RequestTrace, TraceBundle, TOOL_VERSION
from traces.config_base import StrictModel as _Strict
from traces.config_base import error_lines
from traces.errors import TraceFormatError
from traces.lengths import LengthDist, fit_lognormal
from traces.limits import MAX_NUM_REQUESTS
from traces.synthetic import MODEL_NAMES
from traces.synthetic.bursty import BurstyAcceptance
from traces.synthetic.iid import IidAcceptance
from traces.synthetic.positional import PositionalAcceptance

AcceptanceModel = Annotated[Union[IidAcceptance, PositionalAcceptance, BurstyAcceptance],
                            Field(discriminator="model")]
MODELS = dict(zip(MODEL_NAMES, (IidAcceptance, PositionalAcceptance, BurstyAcceptance)))


class DrafterDecl(_Strict):
    """A drafter of the synthetic bundle, as it will appear in trace.yaml."""

    kind: str
    cost_model: str


class CategorySpec(_Strict):
    """One request category: its share of requests, its length distributions, each drafter's acceptance model."""

    weight: float = Field(gt=0)
    prompt: LengthDist
    output: LengthDist
    acceptance: dict[str, AcceptanceModel]
    note: str = ""


class SynthSpec(_Strict):
    """Everything `make_synthetic_bundle` needs; stored as YAML (see traces/data/default/synth-spec.yaml)."""

    target: str
    dataset: str = "synthetic"
    temperature: float = Field(0.0, ge=0)
    description: str = ""
    num_requests: int = Field(300, ge=1, le=MAX_NUM_REQUESTS)
    drafters: dict[str, DrafterDecl] = Field(min_length=1)
    categories: dict[str, CategorySpec] = Field(min_length=1)

    @field_validator("categories")
    @classmethod
    def _every_category_models_every_drafter(cls, cats: dict[str, CategorySpec], info: ValidationInfo):
        drafters = info.data.get("drafters")
        if drafters is None:
            return cats
        for name, cat in cats.items():
            if set(cat.acceptance) != set(drafters):
                raise ValueError(f"categories.{name}.acceptance has drafters {sorted(cat.acceptance)}, "
                                 f"expected exactly {sorted(drafters)}")
        return cats


def parse_synth_spec(doc: Any, path: str) -> SynthSpec:
    """Validate a parsed spec document; TraceFormatError names the file and the first bad key."""
    if not isinstance(doc, dict):
        raise TraceFormatError(path, f"expected a mapping at the top level, got {type(doc).__name__}")
    try:
        return SynthSpec.model_validate(doc)
    except ValidationError as e:
        loc, msg = error_lines(e, model=SynthSpec)[0]
        raise TraceFormatError(path, msg, field=None if loc == "(top level)" else loc) from None


def load_synth_spec(path: str) -> SynthSpec:
    """Read and validate a spec YAML file (traces.parsing: regular file, UTF-8, unique keys, finite numbers)."""
    from traces.parsing import load_yaml_file

    return parse_synth_spec(load_yaml_file(path), path)


def spec_to_yaml(spec: SynthSpec) -> str:
    """YAML text of a spec (round-trips through load_synth_spec)."""
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)


def default_model(kind: str) -> str:
    """Which acceptance model fits a drafter kind by default: bursty for n-gram, positional otherwise."""
    return "bursty" if kind == "ngram" else "positional"


def fit_category(bundle: TraceBundle, models: dict[str, str] | None = None, note: str = "") -> CategorySpec:
    """Fit lengths (lognormal) and each drafter's acceptance model to one bundle."""
    models = models or {}
    acceptance = {}
    for name, d in bundle.meta.drafters.items():
        model = models.get(name, default_model(d.kind))
        if model not in MODELS:
            raise ValueError(f"unknown acceptance model {model!r} for drafter {name!r}; expected one of {list(MODELS)}")
        acceptance[name] = MODELS[model].fit(bundle, name)
    return CategorySpec(weight=category_weight(bundle),
                        prompt=fit_lognormal([r.prompt_len for r in bundle.requests]),
                        output=fit_lognormal([r.output_len for r in bundle.requests]),
                        acceptance=acceptance, note=note)


def category_weight(bundle: TraceBundle) -> float:
    """A fitted category's share of requests: how many requests it was fitted to."""
    return float(len(bundle.requests))


def split_by_category(bundle: TraceBundle, default: str = "all") -> dict[str, TraceBundle]:
    """Sub-bundles per category (requests without one go to `default`)."""
    groups: dict[str, list[RequestTrace]] = {}
    for r in bundle.requests:
        groups.setdefault(r.category or default, []).append(r)
    return {c: TraceBundle(bundle.meta, rs) for c, rs in groups.items()}


def fit_synth_spec(sources: dict[str, TraceBundle], models: dict[str, str] | None = None,
                   num_requests: int | None = None, dataset: str = "synthetic", description: str = "") -> SynthSpec:
    """Fit one category per source bundle; all sources must declare the same drafters."""
    if not sources:
        raise ValueError("fit_synth_spec needs at least one source bundle")
    first = next(iter(sources.values()))
    for cat, b in sources.items():
        if set(b.meta.drafters) != set(first.meta.drafters):
            raise ValueError(f"source {cat!r} has drafters {sorted(b.meta.drafters)}, "
                             f"expected {sorted(first.meta.drafters)} like the first source")
    cats = {c: fit_category(b, models, note=f"fitted to {b.meta.dataset} ({len(b.requests)} requests)")
            for c, b in sources.items()}
    return SynthSpec(target=first.meta.target, dataset=dataset, temperature=first.meta.temperature,
                     description=description,
                     num_requests=num_requests or sum(len(b.requests) for b in sources.values()),
                     drafters={n: DrafterDecl(kind=d.kind, cost_model=d.cost_model)
                               for n, d in first.meta.drafters.items()},
                     categories=cats)


@dataclass(frozen=True)
class CategoryLengths:
    """A category's share and length distributions without acceptance models (a workload's shape only)."""

    weight: float
    prompt: LengthDist
    output: LengthDist


def draw_shapes(categories: Mapping[str, CategorySpec | CategoryLengths], n: int,
                rng: np.random.Generator) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Categories by weight, then each category's prompt and output lengths: the first draws of a synthetic
    bundle, so a workload drawn without acceptance has the same requests as one drawn with it."""
    names = list(categories)
    w = np.array([categories[c].weight for c in names], dtype=np.float64)
    picks = rng.choice(len(names), size=n, p=w / w.sum())
    cats = [names[i] for i in picks.tolist()]
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    for k, c in enumerate(names):
        idx = np.flatnonzero(picks == k).astype(np.int64)
        prompt[idx] = categories[c].prompt.sample(idx.shape[0], rng)
        output[idx] = categories[c].output.sample(idx.shape[0], rng)
    return cats, prompt, output


def synth_request_ids(n: int, id_prefix: str = "syn") -> list[str]:
    """Ids of n synthetic requests: `<prefix>-000000`, zero-padded to at least 6 digits."""
    width = max(6, len(str(n)))
    prefix = id_prefix.replace("{", "{{").replace("}", "}}")  # literal braces in a prefix stay literal
    return list(map(f"{prefix}-{{:0{width}d}}".format, range(n)))  # one format string, not one per id


def synth_requests(spec: SynthSpec, categories: list[str], prompt_lens, output_lens,
                   rng: np.random.Generator, id_prefix: str = "syn") -> list[RequestTrace]:
    """Requests of the given categories and lengths, each drafter's trace drawn from its category's model."""
    out = []
    for rid, cat, pl, ol in zip(synth_request_ids(len(categories), id_prefix), categories, prompt_lens, output_lens):
        models = spec.categories[cat].acceptance
        out.append(RequestTrace(id=rid, prompt_len=int(pl), output_len=int(ol),
                                drafters={d: models[d].generate(int(ol), rng) for d in spec.drafters},
                                category=cat))
    return out


def make_synthetic_bundle(spec: SynthSpec, *, seed: int, num_requests: int | None = None,
                          command: str | None = None) -> TraceBundle:
    """Draw a whole bundle from `spec`: categories by weight, lengths, then acceptance traces (all seeded)."""
    n = num_requests or spec.num_requests
    if not 1 <= n <= MAX_NUM_REQUESTS:  # before anything is drawn or allocated
        raise ValueError(f"num_requests: expected an integer in [1, {MAX_NUM_REQUESTS:,}], got {n:,}")
    rng = np.random.default_rng(seed)
    cats, prompt, output = draw_shapes(spec.categories, n, rng)
    requests = synth_requests(spec, cats, prompt, output, rng)
    source: dict[str, Any] = {"generator": "draftsim traces synth", "seed": seed, "num_requests": n,
                              "spec": spec.model_dump(mode="json", exclude_none=True)}
    if command is not None:
        source["command"] = command
    meta = BundleMeta(target=spec.target, temperature=spec.temperature, dataset=spec.dataset,
                      drafters={d: DrafterSpec(d, x.kind, x.cost_model) for d, x in spec.drafters.items()},
                      source=source, tool_version=TOOL_VERSION)
    bundle = TraceBundle(meta, requests)
    bundle.validate("<synthetic bundle>")
    return bundle
