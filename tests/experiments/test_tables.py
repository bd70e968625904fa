"""The one table convention: headers are summary.json names with units, fixed units per metric family, rows in
the given order, goodput as a share of the offered requests, the default run table within 80 columns."""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.measure import Measurement

from experiments.tables import (RUN_COLUMNS, SWEEP_METRICS, format_value, metric_cell, metric_column, metric_label,
                                metric_unit, metric_words, print_table, run_table, sweep_table)
from tests.experiments.test_report import make_run

SUMMARY_LATENCY_KEYS = [f"{m}_{s}_s" for m in ("ttft", "tpot", "itl", "e2e", "queue_delay")
                        for s in ("mean", "p50", "p90", "p99")]


@pytest.fixture(scope="module")
def summaries():
    return {"AR": make_run(1, 0)[2], "eagle3-k3": make_run(1, 3)[2], "ngram-k5": make_run(2, 5)[2]}


def render(table, width=200, terminal=False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None)
    print_table(table, console)
    return buf.getvalue()


def test_units_follow_the_convention_for_every_latency_key():
    for key in SUMMARY_LATENCY_KEYS:
        family = key.split("_")[0]
        assert metric_unit(key) == ("s" if family == "e2e" else "ms"), key
    assert metric_unit("throughput_tok_s") == "tok/s" and metric_unit("goodput_req_s") == "req/s"
    assert metric_unit("requests_per_s") == "req/s" and metric_unit("makespan_s") == "s"
    assert metric_unit("goodput_fraction") == "% offered"


def test_headers_spell_the_summary_json_names(summaries):
    """A derived header's words joined by '_' plus the unit suffix give back the summary.json key."""
    suffix = {"ms": "_s", "s": "_s", "tok/s": "_tok_s", "req/s": "_req_s"}
    for key in [*SUMMARY_LATENCY_KEYS, "throughput_tok_s", "goodput_req_s"]:
        col = metric_column(key)
        words, unit = col.title.split("\n")[:-1], col.title.split("\n")[-1]
        assert unit == metric_unit(key) and "_".join(words) + suffix[unit] == key
    for col in RUN_COLUMNS:  # every column of the run table reads a summary key (or a speedup over one)
        assert col.key in summaries["AR"] or col.key in ("speedup", "tpot_speedup")


def test_cells_are_the_summary_values_in_display_units(summaries):
    text = render(run_table(summaries, "AR"))
    row = next(ln for ln in text.splitlines() if ln.startswith(" eagle3-k3") or ln.startswith("eagle3-k3")).split()
    s = summaries["eagle3-k3"]
    cols = [c.key for c in RUN_COLUMNS]
    assert row[1 + cols.index("ttft_p99_s")] == f"{s['ttft_p99_s'] * 1e3:,.1f}"  # ms
    assert row[1 + cols.index("tpot_p50_s")] == f"{s['tpot_p50_s'] * 1e3:,.2f}"  # ms
    assert row[1 + cols.index("e2e_p99_s")] == f"{s['e2e_p99_s']:,.2f}"  # s
    # goodput: the share of offered requests meeting the SLO, never requests over the makespan
    assert row[1 + cols.index("goodput_fraction")] == f"{s['goodput_fraction'] * 100:.0f}%"
    assert f"{s['goodput_req_s']:.2f}" not in row


@given(st.permutations(["AR", "eagle3-k3", "ngram-k5"]))
@settings(max_examples=6, deadline=None)
def test_rows_keep_the_given_order(order):
    base = {"AR": make_run(1, 0)[2], "eagle3-k3": make_run(1, 3)[2], "ngram-k5": make_run(2, 5)[2]}
    ordered = {r: base[r] for r in order}
    text = render(run_table(ordered, order[0]))
    seen = [ln.split()[0] for ln in text.splitlines() if ln.split() and ln.split()[0] in base]
    assert seen == list(order)


def test_the_run_table_fits_80_columns_and_folds_rather_than_cuts(summaries):
    table = run_table(summaries, "AR")
    console = Console(width=300)
    assert Measurement.get(console, console.options, table).maximum <= 80
    long = {"a-rather-long-run-name-k3": summaries["eagle3-k3"], **summaries}
    text = render(run_table(long, "AR"), width=80, terminal=True)
    assert all(len(ln) <= 80 for ln in text.splitlines())
    assert "a-rather-long-run-name-k3" in text and "…" not in text  # the run name is never cut


def test_the_caption_states_the_slo_in_display_units(summaries):
    text = render(run_table(summaries, "AR"))
    s = summaries["AR"]
    assert f"ttft <= {s['slo_ttft_s'] * 1e3:,.0f} ms" in text and f"tpot <= {s['slo_tpot_s'] * 1e3:,.0f} ms" in text


def test_a_steady_state_window_is_preferred_when_present(summaries):
    s = {**summaries["AR"], "steady_throughput_tok_s": 12345.0, "steady_slo_attainment": 0.25,
         "steady_e2e_p99_s": 9.87, "overloaded": True}
    text = render(run_table({"AR": s}, "AR"))
    assert "12,345" in text and "25%" in text and "9.87" in text and "steady-state window" in text
    assert "AR (overloaded)" in text and "read no speedup" in text
    assert "steady-state" not in render(run_table({"AR": summaries["AR"]}, "AR"))


def test_sweep_table_rows_and_misfits(summaries):
    points = [{"keys": {"workload.arrival.rate": r}, "summary": {"AR": summaries["AR"], "big": {"fits": False}}}
              for r in (6, 24)]
    text = render(sweep_table(points))
    lines = [ln.split() for ln in text.splitlines() if ln.split() and ln.split()[0] in ("6", "24")]
    assert [(ln[0], ln[1]) for ln in lines] == [("6", "AR"), ("6", "big"), ("24", "AR"), ("24", "big")]
    assert " ".join(lines[1][2:]) == "does not fit"
    assert lines[0][2] == f"{summaries['AR']['throughput_tok_s']:,.0f}"
    assert "workload" in text and "rate" in text  # the dotted key, one part per header line
    assert len(SWEEP_METRICS) == 5


def test_format_value_edge_cases():
    assert format_value(None) == format_value(float("nan")) == "\u2013"
    assert format_value(0.0123, "ms", 1) == "12.3" and format_value(1.5, "x", 2) == "1.50x"
    assert format_value(0.5, "% offered", 0) == "50%" and metric_words("queue_delay_p99_s") == ["queue_delay", "p99"]


def test_cells_and_labels_for_tables_built_elsewhere():
    assert metric_label("ttft_mean_s") == "ttft_mean (ms)" and metric_label("e2e_p99_s") == "e2e_p99 (s)"
    assert metric_label("throughput_tok_s") == "throughput (tok/s)"
    assert metric_cell("tpot_mean_s", 0.03451) == "34.51" and metric_cell("e2e_mean_s", 1.624) == "1.62"
    assert metric_cell("throughput_tok_s", 30512.4) == "30,512"


def _plan_doc():
    def cand(cid, gpus, rate, lo, hi, thr, usd, costs, crossover=None, ceiling=False):
        return {"id": cid, "num_gpus": gpus, "usd_per_hour": 3.0 * gpus, "max_rate_req_s": rate,
                "interval_req_s": [lo, hi], "at_search_ceiling": ceiling, "throughput_tok_s_at_max_rate": thr,
                "usd_per_mtok_at_target_rate": usd, "target_costs": costs, "status": "ok",
                "meets_target_rate": rate >= 50, "sd_vs_ar": crossover}
    return {"name": "plan_llama70b", "question": {"target": "llama3.3-70b", "target_rate_req_s": 50.0},
            "candidates": [cand("h100-80gb tp4 x2 eagle3-k3", 8, 61.25, 60.0, 64.5, 12_345.6, 0.5412, "roofline",
                                {"kind": "crossing", "crossover_req_s": 72.5, "interval_req_s": [70.1, 74.0]}),
                           cand("h100-80gb tp4 x2 AR", 8, 53.5, 53.5, 55.0, 10_564.0, 0.658, "measured: profile.yaml"),
                           cand("h200-141gb tp8 x4 psd-ngram-k5", 32, 210.0, 200.0, None, 45_000.0, 1.0123,
                                "roofline", ceiling=True)]}


def test_the_plan_table_follows_the_convention_and_fits_80_columns():
    from experiments.plan.report import PLAN_COLUMNS, plan_table

    doc = _plan_doc()
    text = render(plan_table(doc), width=80, terminal=True)
    assert all(len(ln) <= 80 for ln in text.splitlines())
    flat = " ".join(text.split())
    # numbers are never folded: each cell appears whole, in its column's unit and decimals
    for cell in ("61.25", "53.50", "210.00+", "12,346", "10,564", "45,000", "0.541", "0.658", "1.012", "72.5",
                 "[60, 64.5]", "[200, open]", "24.00", "96.00"):
        assert cell in flat, cell
    ranks = [ln.split()[0] for ln in text.splitlines() if ln.split() and ln.split()[0] in ("1", "2", "3")]
    assert ranks == ["1", "2", "3"]  # the plan's rank order
    # roofline-priced candidates are marked and the mark is explained; units are the convention's
    assert "eagle3-k3 *" in flat.replace("\n", " ") or "x2 *" in flat
    assert "*: target step times from the roofline model" in flat
    assert {c.unit for c in PLAN_COLUMNS} >= {"req/s", "tok/s", "$/h", "$/Mtok"}
    assert all(c.key in doc["candidates"][0] or c.key == "sd_vs_ar_crossover_req_s" for c in PLAN_COLUMNS)
