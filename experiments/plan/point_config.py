"""A plan point's typed experiment config. A candidate's document (everything but workload and seed) is the same for
every rate and seed it runs at, so it is validated once per process; each point's config is that typed config with
the point's own workload section (validated alone) and seed, not the whole document validated again."""
from __future__ import annotations

import json
from typing import Any

from experiments.config import ExperimentConfig, load_config
from traces.config_base import validate_model
from traces.workload import WorkloadSpec

POINT_KEYS = ("workload", "seed")  # what a point sets on its candidate's document
PLACEHOLDER_WORKLOAD = {"num_requests": 1, "arrival": {"kind": "poisson", "rate": 1.0}}
MEMO_SIZE = 512  # typed candidate configs kept per process; past it the memo starts again (a re-validation, no error)
_typed: dict[str, ExperimentConfig] = {}


def candidate_experiment(doc: dict[str, Any], label: str | None = None) -> ExperimentConfig:
    """The typed config of a candidate's document (its workload and seed left out, a placeholder workload in), validated
    the first time this process sees that document (its key order included); a bad value fails here, naming `label`."""
    part = {k: v for k, v in doc.items() if k not in POINT_KEYS}
    try:
        key = json.dumps(part)
    except TypeError:  # an object in the document (a profile given as an object): validated every time
        return load_config({**part, "workload": PLACEHOLDER_WORKLOAD}, label=label)
    cfg = _typed.get(key)
    if cfg is None:
        cfg = load_config({**part, "workload": PLACEHOLDER_WORKLOAD}, label=label)
        if len(_typed) >= MEMO_SIZE:
            _typed.clear()
        _typed[key] = cfg
    return cfg


def point_experiment(doc: dict[str, Any], label: str | None = None) -> ExperimentConfig:
    """The typed config of one point (a candidate's document with its `workload` and `seed`): the candidate's typed
    config (validated once, candidate_experiment) with the point's workload section validated and its seed set.
    No validator of an experiment config reads the workload or the seed with another section, and the config models
    are frozen, so the points share the candidate's parts safely. The seed is the planner's own (derive_seed: 31 bits).
    """
    base = candidate_experiment(doc, label)
    workload = validate_model(WorkloadSpec, doc["workload"], where=f"{label or 'plan point'}: workload")
    return base.model_copy(update={"workload": workload, "seed": doc["seed"]})
