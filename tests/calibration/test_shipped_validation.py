"""The shipped `draftsim validate` runs: `--analyse-only` on their raw runs reproduces validation.json (measured
figures exactly, fit-derived ones to FIT_REL, so every figure quoted from them can be recomputed on any machine of
this kind), and each folder holds the files its README names."""
from __future__ import annotations

import json
import math
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from calibration.vllm_steps.validate_compare import error_pct, validate_all
from calibration.vllm_steps.validate_run import load_config

ROOT = Path(__file__).parents[2] / "experiments" / "validation"
CONFIG = ROOT / "validate-vllm-cpu.yaml"
# folder -> the modes its run measured (the README's command); both analysed with --repeats 3
SHIPPED = {"vllm-cpu-smollm2-30x128": ["ar", "ngram:4"],
           "vllm-cpu-smollm2-quiet": ["ar", "ngram:4"],
           "vllm-cpu-smollm2-draft-model": ["draft_model:3:layers:24"]}
FILES = ("README.md", "validation.json", "validation.md", "provenance.json", "stdout.txt", "uptime-before.txt",
         "uptime-after.txt", "raw-runs.tar.xz")

# Fields computed from the raw records by arithmetic alone (client timestamps, counts, the config): the same
# bytes on every machine, so compared exactly.
EXACT_FIELDS = ("mode", "rate", "fraction", "metric", "measured", "kind", "load_1min", "repeats")
# Fields that pass through the step-price fits (scipy nnls and least_squares "trf", whose iterates follow the
# BLAS build and CPU and stop at scipy's default 1e-8 tolerances on a flat cost surface): a second machine of
# this kind gave 0.7995504 for the shipped 0.7996509 (1.3e-4 relative). FIT_REL is 4x that and moves an error_pct
# by at most 0.05 x predicted/measured points, below the 0.1-point resolution the docs quote errors at.
FIT_FIELDS = ("predicted", "error_pct", "interval", "inside")
FIT_REL = 5e-4


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=FIT_REL, abs_tol=0.0)


def validation_mismatches(got: list[dict[str, Any]], shipped: list[dict[str, Any]]) -> list[str]:
    """What differs between a re-analysed validation.json and the shipped one: rows, keys and EXACT_FIELDS
    exactly, FIT_FIELDS to FIT_REL; each error_pct must be its own row's (predicted, measured) rounded."""
    if len(got) != len(shipped):
        return [f"{len(got)} rows, shipped {len(shipped)}"]
    out = []
    for i, (g, s) in enumerate(zip(got, shipped)):
        where = f"row {i} ({s.get('mode')} {s.get('fraction')} {s.get('kind')} {s.get('metric')})"
        if list(g) != list(s):
            out.append(f"{where}: keys {list(g)}, shipped {list(s)}")
            continue
        unknown = set(s) - set(EXACT_FIELDS) - set(FIT_FIELDS)
        if unknown:
            out.append(f"{where}: fields {sorted(unknown)} are neither exact nor fit-derived here")
        out += [f"{where}: {k} {g[k]!r}, shipped {s[k]!r}" for k in EXACT_FIELDS if k in s and g[k] != s[k]]
        if not _close(g["predicted"], s["predicted"]):
            out.append(f"{where}: predicted {g['predicted']!r}, shipped {s['predicted']!r} (> {FIT_REL} relative)")
        for row, name in ((g, "re-analysed"), (s, "shipped")):
            if row["error_pct"] != error_pct(row["predicted"], row["measured"]):
                out.append(f"{where}: {name} error_pct {row['error_pct']} is not its predicted vs measured")
        if "interval" in s:
            if not all(_close(a, b) for a, b in zip(g["interval"], s["interval"])):
                out.append(f"{where}: interval {g['interval']}, shipped {s['interval']}")
            m = s["measured"]
            near_edge = m is not None and any(e is not None and _close(m, e) for e in s["interval"])
            if g["inside"] != s["inside"] and not near_edge:
                out.append(f"{where}: inside {g['inside']}, shipped {s['inside']}")
    return out


# reproduction costs ~40 s a folder: CI checks the quiet run the README quotes; the loaded (superseded)
# run is reproduced too with DRAFTSIM_ALL_SHIPPED=1
REPRODUCED = sorted(SHIPPED) if os.environ.get("DRAFTSIM_ALL_SHIPPED") == "1" else ["vllm-cpu-smollm2-quiet"]


@pytest.mark.slow
@pytest.mark.parametrize("folder", REPRODUCED)
def test_analyse_only_reproduces_the_shipped_validation_json(folder, tmp_path):
    src = ROOT / folder
    with tarfile.open(src / "raw-runs.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    cfg = load_config(CONFIG).model_copy(update={"modes": SHIPPED[folder]})
    report = validate_all(cfg, tmp_path, repeats=3)
    got = json.loads(json.dumps(report.rows))  # the floats as the file holds them
    shipped = json.loads((src / "validation.json").read_text(encoding="utf-8"))
    assert validation_mismatches(got, shipped) == []


def _shipped_rows() -> list[dict[str, Any]]:
    return json.loads((ROOT / "vllm-cpu-smollm2-quiet" / "validation.json").read_text(encoding="utf-8"))


def _scaled(rows: list[dict[str, Any]], index: int, factor: float) -> list[dict[str, Any]]:
    """A copy with one row's prediction (and its interval and error) scaled as another machine's fit would."""
    rows = json.loads(json.dumps(rows))
    r = rows[index]
    r["predicted"] *= factor
    r["error_pct"] = error_pct(r["predicted"], r["measured"])
    if "interval" in r:
        r["interval"] = [x * factor for x in r["interval"]]
        r["inside"] = bool(r["interval"][0] <= r["measured"] <= r["interval"][1])
    return rows


def test_the_comparison_takes_another_machines_fit_and_refuses_a_changed_figure():
    shipped = _shipped_rows()
    predictive = next(i for i, r in enumerate(shipped) if "interval" in r)
    assert validation_mismatches(shipped, shipped) == []
    # the difference another machine's BLAS gave (1.3e-4 relative), on a replay and a predictive row
    for i in (0, predictive):
        assert validation_mismatches(_scaled(shipped, i, 1 - 1.26e-4), shipped) == []
    # a prediction 0.1% off, a measured figure off in its 9th digit, a changed count: refused
    assert validation_mismatches(_scaled(shipped, 0, 1.001), shipped)
    assert validation_mismatches(_scaled(shipped, predictive, 0.999), shipped)
    changed = json.loads(json.dumps(shipped))
    changed[0]["measured"] *= 1 + 1e-9
    assert validation_mismatches(changed, shipped)
    fewer = json.loads(json.dumps(shipped))
    fewer[predictive]["repeats"] -= 1
    assert validation_mismatches(fewer, shipped)
    assert validation_mismatches(shipped[:-1], shipped)


def test_an_error_pct_that_is_not_its_rows_own_is_refused():
    shipped = _shipped_rows()
    wrong = json.loads(json.dumps(shipped))
    wrong[3]["error_pct"] += 0.01
    assert any("error_pct" in m for m in validation_mismatches(wrong, shipped))


@pytest.mark.parametrize("folder", sorted(SHIPPED))
def test_shipped_folder_has_its_files(folder):
    src = ROOT / folder
    missing = [f for f in FILES if not (src / f).is_file()]
    assert not missing, f"{src}: missing {missing}"
    assert (src / "raw-runs.tar.xz").stat().st_size < 5 * 2**20
    pngs = sorted(p.name for p in src.glob("cdf-*.png"))
    assert len(pngs) == len(SHIPPED[folder]), pngs
