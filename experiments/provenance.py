"""What a run borrowed: where its step prices, each drafter's acceptance and each drafter's cost came from.

One record per run (`RunProvenance`), built by `run_provenance` from the resolved scenario and the trace bundle's
metadata; `draftsim run` prints its lines under the table and writes it to summary.json (`provenance`), and the
plan's borrowed-acceptance note reads the same rule (`acceptance_provenance`).

Acceptance origin: `measured` (traces recorded for this target), `borrowed` (recorded for another target, or
a level source measured on another target or dataset), `synthetic` (a generated bundle; it names the target its
generators were fitted to, so it is borrowed too when that is another target), `unattributed` (a level source
that records no target). `extrapolated` is set when the run drafts more than a level-1/2 source's measured k.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from traces.acceptance_levels import same_model
from traces.bundle import BundleMeta
from traces.catalog import catalog_name

STEP_PRICE_SOURCES = {"measured": "measured profile", "published": "published fit", "roofline": "roofline",
                      "config": "given in the config", "imported": "imported profile", "unknown": "unknown origin"}
HEAD_KINDS = ("eagle", "mtp")  # drafters trained for one target: their cost belongs to that target
SCALAR_LEVELS = ("mean_length", "per_position")
TAIL_NOTE = ("p99 figures rest on {level} acceptance, which replays every request alike: tails need per-request "
             "data (level per_request or a trace bundle; docs/accuracy.md: p99 TPOT 3-36% low at levels 1-2)")


@dataclass(frozen=True)
class AcceptanceProvenance:
    """Where one drafter's acceptance came from, for the target a run serves."""

    drafter: str
    origin: str  # measured | borrowed | synthetic | unattributed
    recorded_target: str | None
    recorded_dataset: str | None
    level: str  # per_request (a trace bundle) | mean_length | per_position
    measured_k: int | None = None
    run_k: int | None = None
    extrapolated: bool = False
    note: str = ""


@dataclass(frozen=True)
class DraftCostProvenance:
    """Where one drafter's cost came from."""

    drafter: str
    kind: str  # the DraftCost kind
    source: str  # measured profile / published fit / roofline / ... / "no profile"
    profile: str | None = None
    model: str | None = None
    device: str | None = None
    borrowed: bool = False
    note: str = ""


@dataclass(frozen=True)
class RunProvenance:
    """One run's borrowed inputs: step prices, acceptance and drafter costs, and the notes that follow."""

    run: str
    target: str | None
    step_prices: str
    step_profile: str
    step_device: str
    acceptance: list[AcceptanceProvenance] = field(default_factory=list)
    draft_costs: list[DraftCostProvenance] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "RunProvenance":
        """The record back from summary.json's `provenance`."""
        return cls(**{**doc, "acceptance": [AcceptanceProvenance(**a) for a in doc.get("acceptance", [])],
                      "draft_costs": [DraftCostProvenance(**d) for d in doc.get("draft_costs", [])]})

    def lines(self) -> list[str]:
        """This run's statements, one per line (without the run's name)."""
        out = [f"step prices: {self.step_prices} ({self.step_profile}"
               f"{', ' + self.step_device if self.step_device else ''})"
               + (f" for {self.target}" if self.target else "")]
        out += [f"acceptance of {a.drafter}: {a.note}" for a in self.acceptance]
        out += [f"cost of {d.drafter}: {d.note}" for d in self.draft_costs]
        out += [f"note: {n}" for n in self.notes]
        return out


def provenance_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Every run's provenance statements, each once, with the runs it holds for ("all runs" when every run)."""
    runs = [name for name, s in summary.items() if s.get("provenance")]
    holds: dict[str, list[str]] = {}
    for name in runs:
        for line in RunProvenance.from_dict(summary[name]["provenance"]).lines():
            holds.setdefault(line, []).append(name)
    return [f"{line}  [{'all runs' if len(who) == len(runs) and len(runs) > 1 else ', '.join(who)}]"
            for line, who in holds.items()]


def acceptance_provenance(meta: BundleMeta, target: str | None, drafter: str, k: int | None = None
                          ) -> AcceptanceProvenance:
    """Where `drafter`'s acceptance in a bundle came from, for a run on `target` drafting up to `k` per step (the
    one rule `draftsim run` and the plan's borrowed-acceptance note read)."""
    level_info = (meta.extra or {}).get("acceptance_levels", {}).get(drafter)
    synthetic = _is_synthetic(meta)
    if level_info:
        level, measured_k = level_info["level"], int(level_info["measured_k"])
        rec_target, rec_dataset = level_info.get("target"), level_info.get("dataset")
    else:
        level, measured_k = "per_request", None
        rec_target, rec_dataset = meta.target, meta.dataset
    other_target = target is not None and rec_target is not None and not same_model(str(rec_target), str(target))
    if level_info and rec_target is None:
        origin = "unattributed"
    elif other_target:
        origin = "borrowed"
    elif level_info and rec_dataset and meta.dataset and rec_dataset != meta.dataset:
        origin = "borrowed"
    elif synthetic and not level_info:
        origin = "synthetic"
    else:
        origin = "measured"
    extrapolated = bool(level_info and level != "per_request" and k is not None and k > measured_k
                        and level_info.get("extrapolation"))
    words = {"measured": f"measured for {rec_target}",
             "synthetic": f"synthetic (generated, fitted for target {rec_target})",
             "unattributed": "given without a target (none recorded)",
             "borrowed": (f"borrowed from target {rec_target}" if other_target else
                          f"borrowed from dataset {rec_dataset}")}[origin]
    if origin == "borrowed" and synthetic and not level_info:
        words = f"borrowed: synthetic traces fitted for target {rec_target}"
    if origin == "borrowed" and other_target:
        words += f", used for {target}"
    where = f"dataset {rec_dataset}" if rec_dataset else "no dataset recorded"
    note = f"{words} ({where}; level {level}" + (f", measured at k = {measured_k}" if measured_k else "") + ")"
    if extrapolated:
        ex = level_info["extrapolation"]
        note += (f"; extrapolated to k = {k} from the measured k = {measured_k} ({ex['model']}: each further draft "
                 f"accepted with a = {ex['rate']:.3f})")
    return AcceptanceProvenance(drafter, origin, rec_target, rec_dataset, level, measured_k, k, extrapolated, note)


def _is_synthetic(meta: BundleMeta) -> bool:
    src = meta.source or {}
    gen = str(src.get("generator", ""))
    return "synth" in gen or str(meta.dataset).startswith("synthetic")


def draft_cost_provenance(name: str, cost: Any, drafter_kind: str | None, target: str | None
                          ) -> DraftCostProvenance:
    """Where one drafter's cost came from; a head drafter (EAGLE, MTP) whose profile names another target's head
    is borrowed (device names are free text in profiles, so they are shown, not compared)."""
    profile = getattr(cost, "profile", None)
    host = getattr(cost, "host_s", 0.0)
    host_note = f"; + {host * 1e3:.3g} ms host work per drafting phase" if host else ""
    if profile is None:
        what = {"fraction_of_verify": f"{cost.fraction:g} of the step's verify time",
                "constant": f"{cost.seconds:g} s per drafting phase"}.get(cost.kind, cost.kind)
        return DraftCostProvenance(name, cost.kind, "no profile", note=f"{cost.kind}: {what}{host_note}")
    prov = profile.provenance
    source = STEP_PRICE_SOURCES.get(prov.source, prov.source)
    model = str(getattr(getattr(profile, "model", None), "name", getattr(profile, "model", "")) or "") or None
    tgt = catalog_name(target) or (str(target).lower() if target else None)
    borrowed, why = False, []
    if drafter_kind in HEAD_KINDS and tgt and model and tgt not in model.lower():
        borrowed = True
        why.append(f"the {drafter_kind} head's price is {model}'s, not one for {target}")
    note = (f"{cost.kind}: {source} {profile.name}" + (f" of {model}" if model and model not in profile.name else "")
            + (f" ({prov.device})" if prov.device else "") + host_note)
    if borrowed:
        note += "; borrowed: " + "; ".join(why)
    return DraftCostProvenance(name, cost.kind, source, profile.name, model, prov.device or None, borrowed, note)


def _mtp_note(cost: Any, k: int | None) -> str | None:
    """A drafter priced as an MTP head (`TARGET:mtp`) run at k above its n_predict reuses the head (traces/mtp.py)."""
    from traces.catalog import MTP_SUFFIX, get_model
    from traces.mtp import check_mtp_k, reuses_head

    model = getattr(getattr(cost, "profile", None), "model", None)
    name = str(getattr(model, "name", model) or "")
    if not name.endswith(MTP_SUFFIX) or k is None:
        return None
    n_predict = get_model(name[: -len(MTP_SUFFIX)]).mtp_layers
    check_mtp_k(k, n_predict, f"{name} at k = {k}")
    if not reuses_head(k, n_predict):
        return None
    return (f"{name}: k = {k} runs its {n_predict} MTP layer(s) {k // n_predict} times per step (vLLM reuses the "
            f"head and warns of lower acceptance; the acceptance used is whatever was measured at that k, or its "
            f"extrapolation)")


def run_target(scenario: Any) -> str | None:
    """The model a run serves: its deployment's target, else the model its target profile names."""
    dep = scenario.server.deployment
    if dep is not None and dep.target:
        return dep.target
    model = getattr(scenario.target, "model", None)
    return str(getattr(model, "name", model)) if model else None


def _stated_k(policy: Any) -> int | None:
    """The policy's largest k before it runs: an oracle without k_max takes it from the ground truth it is bound to
    when the run starts, so it has none yet (None: no statement about k)."""
    if getattr(policy, "reads_ground_truth", False) and getattr(policy, "k_max", None) is None:
        return None
    return policy.max_draft_tokens()


def run_provenance(scenario: Any, meta: BundleMeta | None) -> RunProvenance:
    """The provenance record of one resolved run (a cluster: of its first replica, all replicas share a config)."""
    sc = scenario.replicas[0] if hasattr(scenario, "replicas") else scenario
    target = run_target(sc)
    prov = sc.target.provenance
    device = prov.device or ""
    acceptance, costs, notes = [], [], []
    policy = sc.policy
    drafters = policy.drafters_used() if policy is not None and sc.mode != "ar" else ()
    k = _stated_k(policy) if drafters else None
    for d in drafters:
        if meta is not None and d in meta.drafters:
            acceptance.append(acceptance_provenance(meta, target, d, k))
        if d in sc.draft_costs:
            kind = meta.drafters[d].kind if meta is not None and d in meta.drafters else None
            costs.append(draft_cost_provenance(d, sc.draft_costs[d], kind, target))
    notes += [n for d in drafters if (n := _mtp_note(sc.draft_costs.get(d), k))]
    scalar = sorted({a.level for a in acceptance if a.level in SCALAR_LEVELS})
    if scalar:
        notes.append(TAIL_NOTE.format(level=" / ".join(scalar)))
    return RunProvenance(sc.name if not hasattr(scenario, "replicas") else scenario.name, target,
                         STEP_PRICE_SOURCES.get(prov.source, prov.source), sc.target.name, device, acceptance, costs,
                         notes)


__all__ = ["RunProvenance", "provenance_lines", "AcceptanceProvenance", "DraftCostProvenance", "acceptance_provenance",
           "draft_cost_provenance", "run_provenance", "run_target"]
