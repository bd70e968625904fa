"""The one table convention of the terminal output (`run`, `sweep`, `plan`, `validate`, `compare`).

A column is a summary.json metric: its header is the metric's name as summary.json spells it, one word per
line, with the display unit as the last line (`ttft_p99_s` -> "ttft / p99 / ms"), so a number on screen is
found in summary.json by its header. Units are fixed per metric family: ms for TTFT, TPOT, ITL and queue
delay; s for E2E and makespan; tok/s; req/s; goodput as a percentage of the offered requests (those meeting
the SLO over all that arrived, not requests over the makespan). Rows keep the order they are given in (the
config's run order). Headers stay narrow so the default run table fits an 80-column terminal; a wider table
folds its headers rather than cutting them, and output that is not a terminal (a log, a pipe) gets the
table's natural width.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MS_FAMILIES = ("ttft", "tpot", "itl", "queue_delay")  # per-token / first-token latencies: shown in ms
UNIT_SCALE = {"ms": 1e3, "s": 1.0, "tok/s": 1.0, "req/s": 1.0, "% offered": 100.0, "%": 100.0, "x": 1.0, "": 1.0}


@dataclass(frozen=True)
class Column:
    """One metric column: `key` in a summary mapping, its display unit and decimals; `header` overrides the
    header derived from the key (for derived columns such as a speedup that summary.json does not hold)."""

    key: str
    unit: str
    digits: int
    header: str | None = None

    @property
    def title(self) -> str:
        """Header text: the metric's words one per line, then the unit."""
        words = self.header if self.header is not None else "\n".join(metric_words(self.key))
        return f"{words}\n{self.unit}" if self.unit and self.unit != "x" else words

    def cell(self, value: Any) -> str:
        """The value in this column's unit; None/NaN as an en dash."""
        return format_value(value, self.unit, self.digits)


def metric_words(key: str) -> list[str]:
    """The words of a summary key without its unit suffix: `ttft_p99_s` -> [ttft, p99]."""
    for suffix in ("_tok_s", "_req_s", "_s"):
        if key.endswith(suffix) and key != suffix:
            key = key[: -len(suffix)]
            break
    if key.startswith("queue_delay"):
        return ["queue_delay", *key[len("queue_delay"):].strip("_").split("_")]
    return key.split("_")


def metric_unit(key: str) -> str:
    """Display unit of a summary.json metric (the convention above)."""
    if key.endswith("_tok_s") or key.endswith("_tok_s_per_gpu"):
        return "tok/s"
    if key.endswith("_req_s") or key == "requests_per_s":
        return "req/s"
    if key == "goodput_fraction":
        return "% offered"
    if key.endswith("_fraction") or key.endswith("_share"):
        return "%"
    if key.endswith("_s"):
        return "ms" if key.split("_")[0] in ("ttft", "tpot", "itl") or key.startswith("queue_delay") else "s"
    return ""


def metric_column(key: str, digits: int | None = None) -> Column:
    """The column of a summary.json metric in the project's unit, with sensible decimals."""
    unit = metric_unit(key)
    if digits is None:
        digits = {"ms": 1, "s": 2, "tok/s": 0, "req/s": 2, "% offered": 0, "%": 0}.get(unit, 2)
        if key.startswith("tpot") or key.startswith("itl"):
            digits = 2
    return Column(key, unit, digits)


def format_value(value: Any, unit: str = "", digits: int = 2) -> str:
    """A number scaled to `unit` with thousands separators; None/NaN as an en dash; strings as given."""
    if value is None:
        return "\u2013"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    v = float(value)
    if v != v:
        return "\u2013"
    text = f"{v * UNIT_SCALE.get(unit, 1.0):,.{digits}f}"
    return text + ("x" if unit == "x" else "%" if unit.startswith("%") else "")


def metric_cell(key: str, value: Any) -> str:
    """A summary.json metric's value in the convention's unit (for tables that are not built here)."""
    return metric_column(key).cell(value)


def metric_label(key: str) -> str:
    """A metric's name with its display unit: `ttft_mean_s` -> "ttft_mean (ms)"."""
    unit = metric_unit(key)
    return "_".join(metric_words(key)) + (f" ({unit})" if unit else "")


# The comparison printed by `draftsim run`: summary.json metrics, in their units.
RUN_COLUMNS: tuple[Column, ...] = (
    metric_column("throughput_tok_s"),
    Column("speedup", "x", 2, header="thrpt\nvs\n{baseline}"),
    Column("tpot_speedup", "x", 2, header="tpot\nvs\n{baseline}"),
    metric_column("ttft_p50_s"), metric_column("ttft_p99_s"),
    metric_column("tpot_p50_s"), metric_column("tpot_p99_s"),
    metric_column("e2e_p50_s"), metric_column("e2e_p99_s"),
    Column("mean_acceptance_length", "", 2, header="mean\naccept\nlength"),
    Column("goodput_fraction", "%", 0, header="goodput\nfraction"),
)
PER_GPU_COLUMN = Column("throughput_tok_s_per_gpu", "tok/s", 0, header="throughput\nper_gpu")
# what a sweep shows per point and run (sweep.json / table.csv hold more)
SWEEP_METRICS = ("throughput_tok_s", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s", "goodput_fraction")


# whole-run metric -> its steady-state-window twin in summary.json (simulator/measure/metrics.py), shown when present
STEADY_TWINS = {
    "throughput_tok_s": "steady_throughput_tok_s", "throughput_tok_s_per_gpu": "steady_throughput_tok_s_per_gpu",
    "requests_per_s": "steady_requests_per_s", "goodput_req_s": "steady_goodput_req_s",
    "goodput_fraction": "steady_slo_attainment", "ttft_p99_s": "steady_ttft_p99_s",
    "tpot_p99_s": "steady_tpot_p99_s", "e2e_p99_s": "steady_e2e_p99_s",
}


def has_steady_window(summary: Mapping[str, Any]) -> bool:
    """True when the run's summary holds steady-state-window figures."""
    return summary.get("steady_throughput_tok_s") is not None


def summary_value(summary: Mapping[str, Any], key: str) -> Any:
    """`key` of a run's summary, its steady-state-window twin when the summary has one (DESIGN: steady state is
    what runs are compared on)."""
    twin = STEADY_TWINS.get(key)
    if twin is not None and summary.get(twin) is not None:
        return summary[twin]
    return summary.get(key)


def run_rows(summary_by_run: Mapping[str, Mapping[str, Any]], baseline: str) -> list[dict[str, Any]]:
    """One row per run (in the given order): its summary plus the speedups over `baseline`."""
    if baseline not in summary_by_run:
        raise ValueError(f"baseline run {baseline!r} is not among the runs {list(summary_by_run)}")
    base = summary_by_run[baseline]
    b_thr, b_tpot = summary_value(base, "throughput_tok_s"), summary_value(base, "tpot_mean_s")
    rows = []
    for run, s in summary_by_run.items():
        row = {k: summary_value(s, k) for k in s if k not in ("extras", "replicas")}
        thr, tpot = row.get("throughput_tok_s"), row.get("tpot_mean_s")
        row["speedup"] = thr / b_thr if thr is not None and b_thr else None
        row["tpot_speedup"] = b_tpot / tpot if tpot and b_tpot else None
        row["run"] = run + (" (overloaded)" if s.get("overloaded") else "")
        rows.append(row)
    return rows


def build_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, labels: Sequence[str] = ("run",),
                title: str | None = None, bold: str | None = None, caption: str | None = None,
                wrap_labels: Sequence[str] = ()):
    """A rich Table: the `labels` columns (left, taken from each row as text), then one column per metric.

    `bold` names the row (by its first label) to emphasise. A row holding `note` (e.g. "does not fit") shows
    that text instead of its metrics. Numbers never fold (a metric column is at least as wide as its widest
    cell; its header folds instead); the last label stays on one line unless it is named in `wrap_labels`."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=0,
                  caption=caption, caption_justify="left")
    for i, lab in enumerate(labels):
        widest = max([len(_label(r.get(lab))) for r in rows] or [0])
        one_line = i == len(labels) - 1 and lab not in wrap_labels
        longest_word = max([len(w) for r in rows for w in _label(r.get(lab)).split()] or [0])
        table.add_column(lab.replace(".", "\n") if "." in lab else lab, justify="left", overflow="fold",
                         no_wrap=one_line, min_width=min(widest if one_line else longest_word, 28))
    cells_by_row = []
    for row in rows:
        cells = [_label(row.get(lab)) for lab in labels]
        if row.get("note"):
            cells += [str(row["note"])] + [""] * (len(columns) - 1)
        else:
            cells += [col.cell(row.get(col.key)) for col in columns]
        cells_by_row.append(cells)
    for j, col in enumerate(columns, start=len(labels)):
        widest = max([len(c[j]) for c, r in zip(cells_by_row, rows) if not r.get("note")] or [1])
        table.add_column(col.title, justify="right", overflow="fold", min_width=widest)
    for row, cells in zip(rows, cells_by_row):
        first = str(row.get(labels[0], "")) if labels else ""
        table.add_row(*cells, style="bold" if bold is not None and first == bold else None)
    return table


def _label(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def print_table(table, console) -> None:
    """Print to a terminal at its width (headers fold when needed), elsewhere at the table's natural width."""
    from rich.measure import Measurement

    if not console.is_terminal:
        natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
        console.width = max(console.width, natural)
    console.print(table)


def run_table(summary_by_run: Mapping[str, Mapping[str, Any]], baseline: str, *, title: str | None = None):
    """The `draftsim run` comparison (per-GPU throughput added when the runs use different GPU counts)."""
    rows = run_rows(summary_by_run, baseline)
    cols = [Column(c.key, c.unit, c.digits, c.header.format(baseline=baseline)) if c.header else c
            for c in RUN_COLUMNS]
    if len({s.get("num_gpus") for s in summary_by_run.values() if s.get("num_gpus") is not None}) > 1:
        cols.insert(1, PER_GPU_COLUMN)
    caption = goodput_caption(summary_by_run, baseline)
    if any(has_steady_window(s) for s in summary_by_run.values()):
        caption += (" Throughput, p99s and goodput: over each run's steady-state window (warm-up and drain left "
                    "out; summary.json steady_*); p50s and tpot vs the baseline: whole run.")
    if any(s.get("overloaded") for s in summary_by_run.values()):
        caption += " (overloaded): arrivals outpace service, the queue grows; read no speedup or capacity from it."
    bold = rows[list(summary_by_run).index(baseline)]["run"]
    return build_table(rows, cols, title=title, bold=bold, caption=caption)


def goodput_caption(summary_by_run: Mapping[str, Mapping[str, Any]], baseline: str) -> str:
    """What the goodput and speedup columns mean, with the SLO the runs were judged by."""
    s = summary_by_run[baseline]
    units = {"ttft": "ms", "tpot": "ms", "e2e": "s"}
    slo = ", ".join(f"{name} <= {format_value(s[f'slo_{name}_s'], unit, 0 if unit == 'ms' else 2)} {unit}"
                    for name, unit in units.items() if s.get(f"slo_{name}_s") is not None)
    return (f"goodput_fraction: share of the offered requests that finished within the SLO ({slo or 'none set'}); "
            f"thrpt/tpot vs {baseline}: throughput_tok_s and 1/tpot_mean_s over {baseline}'s.")


def sweep_table(points: Sequence[Mapping[str, Any]], *, title: str | None = None,
                metrics: Sequence[str] = SWEEP_METRICS):
    """The `draftsim sweep` table: per point (in sweep order) and run (in config order), its keys and metrics."""
    keys = list(points[0]["keys"]) if points else []
    rows = []
    for p in points:
        for run, s in p["summary"].items():
            rows.append({**{k: p["keys"][k] for k in keys}, "run": run, **{m: summary_value(s, m) for m in metrics},
                         "note": None if s.get("fits", True) else "does not fit"})
    return build_table(rows, [metric_column(m) for m in metrics], labels=[*keys, "run"], title=title)
