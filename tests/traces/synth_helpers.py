"""Test helper: a bundle whose one drafter's traces come from a given generator."""
from __future__ import annotations

import numpy as np

from traces.bundle import BundleMeta, DrafterSpec, RequestTrace, TraceBundle


def bundle_from(gen, n: int = 200, length: int = 200, seed: int = 0, kind: str = "eagle") -> TraceBundle:
    rng = np.random.default_rng(seed)
    meta = BundleMeta(target="t", drafters={"d": DrafterSpec("d", kind, "c")})
    return TraceBundle(meta, [RequestTrace(f"r{i}", 10, length, {"d": gen.generate(length, rng)})
                              for i in range(n)])
