"""What `draftsim plan` shows: the ranked terminal table, throughput-latency curves and the cost-vs-capacity
Pareto plot (PNG, written atomically with the project's one figure saver)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.plots import _figure, save_figure
from experiments.tables import Column, build_table, print_table

PLOT_FILES = ("curves.png", "pareto.png", "pareto_user_gpu.png")
CURVES_MAX = 12  # candidates drawn in the curves (the best ranked), so lines stay readable


# The plan table: plan.json's candidate keys, in the run-table convention (experiments/tables.py): the key's
# words one per line, then the unit; ranked order; text cells (the interval, the crossover) as plan.json holds them.
PLAN_COLUMNS: tuple[Column, ...] = (
    Column("num_gpus", "", 0, header="num\ngpus"),
    Column("usd_per_hour", "$/h", 2, header="usd\nper\nhour"),
    Column("max_rate_req_s", "req/s", 2, header="max\nrate"),
    Column("interval_req_s", "req/s", 0, header="interval"),
    Column("throughput_tok_s_at_max_rate", "tok/s", 0, header="steady\nthrpt\nat max"),
    Column("usd_per_mtok_at_target_rate", "$/Mtok", 3, header="usd per\nmtok at\ntarget"),
    Column("sd_vs_ar_crossover_req_s", "req/s", 1, header="SD\nbeats\nAR\nup to"),
)
RULE_KEYS = ("window", "overload", "sustainable", "confidence", "interval", "seeds_per_rate_rule", "size",
             "service_bound", "service_probe", "early_stop", "scope", "search", "crossover", "comparison",
             "draft_transfer", "deploy")


def _interval_cell(c: dict[str, Any]) -> str:
    lo, hi = c.get("interval_req_s") or (None, None)
    if c.get("max_rate_req_s") is None or lo is None:
        return "\u2013"
    return f"[{lo:.3g}, {'open' if hi is None else f'{hi:.3g}'}]"


def _crossover_cell(c: dict[str, Any]) -> str:
    """The searched SD-vs-AR crossover (experiments/plan/crossover.py), 3 significant digits: the estimate where it
    crosses (its interval: crossover_line), '>x' faster at every rate decided up to x, 'never' slower from the bottom
    of its range."""
    x = c.get("sd_vs_ar")
    if not x:
        return "\u2013"
    lo, hi = x.get("interval_req_s") or (None, None)
    if x.get("kind") == "crossing":
        return f"{x['crossover_req_s']:.3g}"
    if x.get("kind") == "faster_throughout":
        return f">{lo:.3g}"
    if x.get("kind") == "slower_throughout":
        return "never"
    return "?"


def crossover_line(c: dict[str, Any]) -> str | None:
    """One line with a drafting candidate's searched crossover and its interval (None: not a crossing)."""
    x = c.get("sd_vs_ar") or {}
    if x.get("kind") != "crossing":
        return None
    lo, hi = x["interval_req_s"]
    return (f"SD vs AR, {c['id']}: mean E2E reaches AR's at {x['crossover_req_s']:.3g} req/s "
            f"[{lo:.3g}, {hi:.3g}] (faster at the low end, slower at the high end; plan.json rule.crossover)")


def plan_rows(doc: dict[str, Any], limit: int | None = None) -> list[dict[str, Any]]:
    """One row per candidate in rank order: plan.json's numbers plus the text cells the table shows."""
    rows = []
    for i, c in enumerate(doc["candidates"] if limit is None else doc["candidates"][:limit], 1):
        rate = c.get("max_rate_req_s")
        research = not (c.get("deploy") or {}).get("deployable", True)
        rows.append({**c, "#": str(i), "candidate": c["id"] + ("" if c["target_costs"].startswith("measured") else " *"),
                     "max_rate_req_s": f"{rate:,.2f}+" if rate is not None and c.get("at_search_ceiling") else rate,
                     "interval_req_s": _interval_cell(c), "sd_vs_ar_crossover_req_s": _crossover_cell(c),
                     "status": _status(c) + (", research" if research else "")})
    return rows


def plan_table(doc: dict[str, Any], limit: int | None = None):
    """The ranked candidates as one table of the project's convention (experiments/tables.py)."""
    q = doc["question"]
    return build_table(plan_rows(doc, limit), PLAN_COLUMNS, labels=("#", "candidate", "status"),
                       wrap_labels=("status",),
                       title=f"plan {doc['name']}: {q['target']} at {q['target_rate_req_s']:g} req/s "
                             f"({len(doc['candidates'])} candidates)",
                       caption="*: target step times from the roofline model (no measured profile). research: "
                               "vLLM cannot run the mode as simulated, never the deploy line. max rate "
                               "'+': sustains its search ceiling; interval 'open': no tested rate was a decided fail. "
                               "SD beats AR up to: the searched rate where this mode's mean E2E latency reaches "
                               "AR's on the same GPUs (its interval below the answer, or --explain; '>x': faster at "
                               "every rate decided, up to x; 'never': slower already at the lowest; '?': undecided). "
                               "Throughput and $/Mtok over the steady-state window; the rules: --explain or "
                               "plan.json.")


def does_not_fit_line(doc: dict[str, Any]) -> str | None:
    """One summary line for every candidate that does not fit (each reason is in plan.json)."""
    bad = [c for c in doc["candidates"] if c["status"] == "does_not_fit"]
    if not bad:
        return None
    where = sorted({f"{c['gpu']} tp{c['tp']}" + (f" x{c['replicas']}" if c["replicas"] > 1 else "") for c in bad})
    modes = sorted({c["mode"] for c in bad})
    return (f"does not fit: {len(bad)} candidate(s) on {', '.join(where)} (modes {', '.join(modes)}): weights, "
            "drafter and KV exceed the GPUs' memory; each reason in plan.json")


def print_plan(doc: dict[str, Any], console, limit: int | None = None, explain: bool = False) -> None:
    """The ranked table, the answer, its deploy line, the best research row and a short assumptions block; with
    `explain` the rules and notes too (always in plan.json)."""
    print_table(plan_table(doc, limit), console)
    if limit is not None and len(doc["candidates"]) > limit:
        console.print(f"... {len(doc['candidates']) - limit} more candidates in plan.json")
    line = does_not_fit_line(doc)
    if line:
        console.print(line)
    skipped = sum(c["status"] == "not_searched" for c in doc["candidates"])
    if skipped:
        console.print(f"not searched: {skipped} candidate(s), each with its reason in plan.json (rule (scope))")
    q = doc["question"]
    best = doc["cheapest"]
    console.print(f"[bold]cheapest deployable for {q['target_rate_req_s']:g} req/s:[/bold] "
                  + (best if best else "none of the deployable candidates sustains the target rate"))
    confidence = doc["rule"].get("confidence")
    if confidence:  # the stated bound, without its derivation (--explain)
        console.print(f"confidence of every max rate: {confidence.split(':')[0]} (plan.json rule.confidence)")
    deploy = doc.get("deploy")
    if deploy:
        console.print(f"deploy ({deploy['replicas']} replica(s), vLLM {deploy['vllm_version']}; {deploy['runs']}): "
                      f"{deploy['command']}", soft_wrap=True)
    research = doc.get("best_research")
    if research:
        console.print(f"best research row: {research['id']} (${research['usd_per_hour']:g}/h, "
                      f"{research['max_rate_req_s']:.4g} req/s); gain: {research['gain']}; not deployable: "
                      f"{research['why_not_deployable']}", soft_wrap=True)
    shown = [doc["cheapest"], (research or {}).get("id")]
    lines = [crossover_line(c) for c in doc["candidates"] if explain or c["id"] in shown]
    for text in filter(None, lines):
        console.print(text, soft_wrap=True)
    assumptions = doc.get("assumptions") or {}
    for kind in ("measured", "borrowed", "modelled"):
        for text in assumptions.get(kind, ()):
            console.print(f"{kind}: {text}", soft_wrap=True)
    console.print("prices ($/GPU-hour): " + "; ".join(f"{g} {p['usd_per_gpu_hour']:g}"
                                                       for g, p in doc["prices"].items()) + " (sources in plan.json)")
    if not explain:
        return
    rule = doc["rule"]
    for key in RULE_KEYS:
        if key in rule:
            console.print(f"rule ({key}): {rule[key]}", soft_wrap=True)
    for note in doc["notes"]:
        console.print(f"note: {note}", soft_wrap=True)
    console.print("prices: " + "; ".join(f"{g} {p['usd_per_gpu_hour']:g} ({p['source']})"
                                         for g, p in doc["prices"].items()), soft_wrap=True)


def _status(c: dict[str, Any]) -> str:
    if c["status"] == "does_not_fit":
        return "does not fit (below)"
    if c["status"] == "not_searched":
        return "not searched (plan.json)"
    if (c.get("reason") or "").startswith("fails at the target rate"):
        return "below target (tested at it only)"
    if c.get("meets_target_rate"):
        return "meets target" + (" at ceiling" if c.get("at_search_ceiling") else "")
    return "below target" if c.get("max_rate_req_s") else "SLO never met"


def pareto_front(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """(capacity, cost, id) not dominated by another point with at least the capacity at no more cost."""
    front = []
    for cap, cost, cid in sorted(points, key=lambda p: (p[1], -p[0], p[2])):
        if not front or cap > front[-1][0]:
            front.append((cap, cost, cid))
    return front


def write_plots(doc: dict[str, Any], out: str | Path) -> list[Path]:
    """The plan's three plots; the latency curves drawn in a forked child while this process draws the other two
    (experiments/beside.py: the same bytes, the wall time of the longer)."""
    from experiments.beside import Beside

    out = Path(out)
    searched = [c for c in doc["candidates"] if c["status"] == "ok" and c.get("curve")]
    curves = Beside("drawing the plan's latency curves", _curves, searched[:CURVES_MAX], doc, out / PLOT_FILES[0])
    try:
        rest = [_pareto(searched, doc, out / PLOT_FILES[1]), _user_gpu(searched, doc, out / PLOT_FILES[2])]
    except BaseException:
        curves.stop()
        raise
    return [curves.result(), *rest]


def user_gpu_points(c: dict[str, Any]) -> list[tuple[float, float]]:
    """(output tokens/s per user, output tokens/s per GPU) at each stable tested rate of a candidate: per user 1 /
    the window's mean TPOT, per GPU the steady-state throughput over every GPU (draft GPUs included)."""
    out = []
    for p in c.get("curve") or []:
        tpot, thr = p.get("steady_tpot_mean_s_mean"), p.get("steady_throughput_tok_s_mean")
        if tpot and thr and not p.get("overloaded"):
            out.append((1.0 / tpot, thr / c["num_gpus"]))
    return out


def upper_right_front(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """(x, y, id) not dominated by another point at least as high on both axes (more is better on both)."""
    front = []
    for x, y, cid in sorted(points, key=lambda p: (-p[0], -p[1], p[2])):
        if not front or y > front[-1][1]:
            front.append((x, y, cid))
    return front


def _curves(cands: list[dict[str, Any]], doc: dict[str, Any], path: Path) -> Path:
    slo = doc["question"]["slo"]
    metrics = [m for m in ("ttft", "tpot", "e2e") if slo.get(f"{m}_s") is not None]
    fig, axes = _figure(1, len(metrics), 4.6 * len(metrics), 4.2 + 0.16 * ((len(cands) + 2) // 3))
    for ax, m in zip(axes, metrics):
        for i, c in enumerate(cands):
            pts = [(p["steady_throughput_tok_s_mean"], p[f"steady_{m}_p99_s_mean"]) for p in c["curve"]
                   if p["steady_throughput_tok_s_mean"] is not None and p[f"steady_{m}_p99_s_mean"] is not None
                   and not p.get("overloaded")]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, marker="o", ms=3, color=f"C{i % 10}", label=c["id"],
                        linestyle="-" if i < 10 else "--")
        ax.axhline(slo[f"{m}_s"], color="k", linestyle=":", linewidth=1)
        ax.set_xlabel("steady-state throughput (output tok/s)")
        ax.set_ylabel(f"{m.upper()} p99 (s)")
        ax.set_yscale("log")
        ax.set_title(f"{m.upper()} p99 (dotted: the SLO)", fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # no curve point drawn (all overloaded): no legend to draw
        fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=6, frameon=False)
    fig.suptitle(f"{doc['name']}: throughput vs latency, {len(cands)} best candidates\nstable tested rates only "
                 "(search rates: mean over seeds; curve rates: first seed)", fontsize=9)
    return save_figure(fig, path)


def _label_points(ax, pts: list[tuple[float, float, str]], xmax: float, ymax: float) -> None:
    """Label points inside the axes (x up to xmax, y up to ymax): text to the left of points in the right 40% of the
    x range, alternately above and below, with head room so no label leaves the figure."""
    xmax, ymax = xmax or 1.0, ymax or 1.0
    ax.set_xlim(right=1.05 * xmax)
    ax.set_ylim(top=1.12 * ymax)
    for i, (x, y, cid) in enumerate(pts):
        right = x > 0.6 * xmax
        ax.annotate(cid, (x, y), fontsize=6, xytext=(-4 if right else 4, 4 if i % 2 == 0 else -10),
                    textcoords="offset points", ha="right" if right else "left")


def _user_gpu(cands: list[dict[str, Any]], doc: dict[str, Any], path: Path) -> Path:
    """Output tokens/s per user against tokens/s per GPU (the convention of `vllm bench sweep plot_pareto` and
    AIConfigurator): every stable tested rate of every candidate, the upper-right front labelled."""
    fig, (ax,) = _figure(1, 1, 7.5, 5.2)
    pts = [(x, y, c["id"]) for c in cands for x, y in user_gpu_points(c)]
    deployable = {c["id"] for c in cands if (c.get("deploy") or {}).get("deployable")}
    if pts:
        for label, keep, color in (("deployable (vLLM)", True, "C0"), ("research", False, "C1")):
            sel = [p for p in pts if (p[2] in deployable) == keep]
            if sel:
                ax.scatter([p[0] for p in sel], [p[1] for p in sel], s=12, color=color, alpha=0.6, label=label)
        front = upper_right_front(pts)
        ax.plot([p[0] for p in front], [p[1] for p in front], color="C3", marker="o", ms=4, label="Pareto front")
        _label_points(ax, front, max(p[0] for p in pts), max(p[1] for p in pts))
        ax.legend(fontsize=7, loc="lower left")
    ax.set_xlabel("output tokens/s per user (1 / mean TPOT)")
    ax.set_ylabel("output tokens/s per GPU (draft GPUs included)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{doc['name']}: per-user speed vs per-GPU throughput\n(each stable tested rate; steady-state "
                 "window)", fontsize=9)
    return save_figure(fig, path)


def _pareto(cands: list[dict[str, Any]], doc: dict[str, Any], path: Path) -> Path:
    fig, (ax,) = _figure(1, 1, 7.5, 5.0)
    pts = [(c["max_rate_req_s"], c["usd_per_hour"], c["id"]) for c in cands if c.get("max_rate_req_s")]
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, color="C0", alpha=0.6, label="candidates")
        front = pareto_front(pts)
        ax.plot([p[0] for p in front], [p[1] for p in front], color="C3", marker="o", label="Pareto front")
        _label_points(ax, front, max([p[0] for p in pts] + [doc["question"]["target_rate_req_s"]]),
                      max(p[1] for p in pts))
    ax.axvline(doc["question"]["target_rate_req_s"], color="k", linestyle=":", linewidth=1, label="target rate")
    ax.set_xlabel("max sustainable rate under the SLO (req/s)")
    ax.set_ylabel("$ per hour (all GPUs, draft GPUs included)")
    ax.set_xlim(left=0)  # from zero: a small spread must not look like a gulf
    ax.set_ylim(bottom=0)
    ax.set_title(f"{doc['name']}: cost vs capacity")
    ax.legend(fontsize=7)
    return save_figure(fig, path)
