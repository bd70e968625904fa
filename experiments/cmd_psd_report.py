"""`draftsim psd-report CONFIG --out DIR`: run a PSD experiment (psd_vs_sd or psd_bounds) into tables and plots."""
from __future__ import annotations

from experiments.psd_report import register  # noqa: F401  (the subcommand is defined with its runner)
