"""Seeded synthetic acceptance generators (i.i.d., per-position, bursty n-gram) and synthetic bundles."""
from traces.synthetic.bursty import BurstyAcceptance
from traces.synthetic.iid import IidAcceptance
from traces.synthetic.positional import PositionalAcceptance
from traces.synthetic.spec import (MODELS, CategorySpec, DrafterDecl, SynthSpec, fit_category, fit_synth_spec,
                                   load_synth_spec, make_synthetic_bundle, parse_synth_spec, spec_to_yaml,
                                   split_by_category, synth_requests)
from traces.synthetic.tv import BetaParams, TvModel

__all__ = ["BurstyAcceptance", "IidAcceptance", "PositionalAcceptance", "MODELS", "CategorySpec", "DrafterDecl",
           "SynthSpec", "fit_category", "fit_synth_spec", "load_synth_spec", "make_synthetic_bundle",
           "parse_synth_spec", "spec_to_yaml", "split_by_category", "synth_requests", "BetaParams", "TvModel"]
