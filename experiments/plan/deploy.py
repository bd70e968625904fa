"""What vLLM runs for a simulated plan mode: the `--speculative-config` that deploys exactly the simulated method, k
and proposer settings, checked against the rules of one vLLM release, or why vLLM cannot run the mode (a research
row: never the deploy line).

The rules are those of vLLM VLLM_VERSION (vllm/config/speculative.py `SpeculativeConfig`, a pydantic dataclass
with extra keys forbidden, and vllm/v1/spec_decode/dynamic/utils.py `validate_and_normalize_dynamic_sd_schedule`):

- fixed k -> `{method, num_speculative_tokens: k, ...}`; `method` must be one of METHODS (the MTP model-type
  aliases are deprecated names of `mtp`), `num_speculative_tokens` > 0;
- n-gram (`ngram`, `ngram_gpu`): `prompt_lookup_min/max` >= 1, min <= max; neither given -> both 5, one given ->
  the other equal to it (NGRAM_DEFAULT_LOOKUP); the bounds are those the replayed acceptance was recorded with
  when the trace says (DrafterSpec.params), else the deploy line states the resolved ones as an assumption;
- k by batch size -> `num_speculative_tokens_per_batch_size: [[lo, hi, k], ...]` (inclusive batch-size ranges,
  positive, sorted without overlap, the first from 1; k >= 0 and capped by `num_speculative_tokens`; past the last
  range its k carries on), with `num_speculative_tokens` = the largest k;
- MTP (`method: mtp`, or a deprecated model-type alias): the target's own head drafts (vLLM loads it from the
  target's checkpoint when `model` is not given), so the target must have one (catalog `mtp_layers` = its
  config's `num_nextn_predict_layers` = vLLM's `n_predict`), and `num_speculative_tokens` > n_predict must be a
  multiple of it (vLLM reuses the layers in turn: traces/mtp.py `check_mtp_k`); the mode's `drafter_model` is
  that head (`TARGET:mtp`), so its weights are placed beside the target's (`check_mtp`);
- `tensor_parallel_size` inside the JSON is refused by vLLM (use `draft_tensor_parallel_size`, 1 or the target's
  TP); keys vLLM sets itself (target/draft model and parallel configs) and unknown keys are refused too.

Anything else - acceptance-driven adaptive k, bandits, per-request drafter choice (combine), oracles, MineDraft's
PSD (a plugin of vLLM 0.9.2, not in vLLM) - has no vLLM equivalent in this release: a research row.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policies.registry import PolicySpec

VLLM_VERSION = "0.32.0"
VLLM_RULES = (f"vLLM {VLLM_VERSION}: vllm/config/speculative.py (SpeculativeConfig) and "
              "vllm/v1/spec_decode/dynamic/utils.py (the per-batch-size schedule)")

MTP_ALIASES = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp",
    "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp",
    "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp",
    "glm5_next_mtp"})
METHODS = frozenset({"ngram", "ngram_gpu", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class",
                     "eagle", "eagle3", "extract_hidden_states", "mtp", "dflash", "dspark"}) | MTP_ALIASES
NGRAM_METHODS = frozenset({"ngram", "ngram_gpu"})
# methods whose proposer needs `model` (vLLM: "num_speculative_tokens was provided but without speculative model")
NEEDS_MODEL = METHODS - NGRAM_METHODS - MTP_ALIASES - {"mtp", "dspark", "suffix", "extract_hidden_states"}
NGRAM_DEFAULT_LOOKUP = 5  # prompt_lookup_min = prompt_lookup_max = 5 when neither is given
USER_KEYS = frozenset({
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size", "quantization",
    "moe_backend", "attention_backend", "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max", "prompt_lookup_min",
    "parallel_drafting", "num_speculative_tokens_per_batch_size", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "draft_load_config", "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk"})
REFUSED_KEYS = {
    "tensor_parallel_size": "vLLM refuses it inside the speculative config; the drafter's TP is "
                            "draft_tensor_parallel_size (1 or the target's TP)",
    "target_model_config": "set by vLLM from the engine's own arguments", "target_parallel_config": "set by vLLM",
    "draft_model_config": "set by vLLM", "draft_parallel_config": "set by vLLM",
    "synthetic_acceptance_rates": "forces an acceptance profile: the plan replays the trace's acceptance",
    "synthetic_acceptance_length": "forces an acceptance profile: the plan replays the trace's acceptance",
}
# trace drafter kind (traces/bundle.py DRAFTER_KINDS) -> the vLLM methods that propose like it
KIND_METHODS = {"eagle": frozenset({"eagle", "eagle3"}), "ngram": NGRAM_METHODS,
                "draft_model": frozenset({"draft_model"}), "int8": frozenset({"draft_model"}),
                "truncated": frozenset({"draft_model"}), "mtp": frozenset({"mtp"}) | MTP_ALIASES}
RESEARCH_POLICIES = {  # policy name -> why vLLM cannot run it
    "adaptive-k": "k driven by each request's running acceptance: vLLM has no acceptance-driven per-step k",
    "combine-match": "a drafter chosen per request and step (n-gram or EAGLE): vLLM runs one proposer",
    "combine-adaptive": "a drafter chosen per request and step: vLLM runs one proposer",
}


@dataclass(frozen=True)
class Deploy:
    """What vLLM runs for one mode on one candidate: a speculative config (None: plain AR) or why it cannot."""

    deployable: bool
    why: str
    speculative_config: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"deployable": self.deployable, "vllm_version": VLLM_VERSION, "why": self.why,
                "speculative_config": self.speculative_config}

    def cli_arg(self) -> str | None:
        """The `--speculative-config '...'` argument (None: none)."""
        if self.speculative_config is None:
            return None
        return f"--speculative-config '{json.dumps(self.speculative_config, sort_keys=True, separators=(',', ':'))}'"


def _int(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{where}: expected an integer >= {low}, got {value!r} ({VLLM_RULES})")
    return value


def check_schedule(schedule: Any, where: str) -> list[list[int]]:
    """vLLM's rules for `num_speculative_tokens_per_batch_size` (sorted [[lo, hi, k], ...])."""
    if not isinstance(schedule, list) or not schedule:
        raise ValueError(f"{where}: expected a non-empty list of [range_start, range_end, k] ({VLLM_RULES})")
    out = []
    for i, entry in enumerate(schedule):
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            raise ValueError(f"{where}[{i}]: expected [range_start, range_end, k], got {entry!r}")
        lo, hi = _int(entry[0], f"{where}[{i}][0]", 1), _int(entry[1], f"{where}[{i}][1]", 1)
        k = _int(entry[2], f"{where}[{i}][2]", 0)
        if lo > hi:
            raise ValueError(f"{where}[{i}]: range start {lo} > end {hi}")
        out.append([lo, hi, k])
    out.sort()
    for a, b in zip(out, out[1:]):
        if b[0] <= a[1]:
            raise ValueError(f"{where}: batch-size ranges overlap ({a} and {b}); vLLM needs them non-overlapping")
    if out[0][0] != 1:
        raise ValueError(f"{where}: the first batch-size range must start at 1, got {out[0]}")
    return out


def check_speculative_config(doc: Any, where: str) -> dict[str, Any]:
    """The config with vLLM's defaults made explicit (n-gram lookup bounds), or ValueError naming the key."""
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a mapping of SpeculativeConfig keys, got {doc!r}")
    for key in doc:
        if key in REFUSED_KEYS:
            raise ValueError(f"{where}.{key}: not allowed: {REFUSED_KEYS[key]} ({VLLM_RULES})")
    unknown = sorted(set(doc) - USER_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; vLLM {VLLM_VERSION}'s SpeculativeConfig forbids extra "
                         f"keys; expected some of {sorted(USER_KEYS)}")
    out = dict(doc)
    method = doc.get("method")
    if method is None:
        raise ValueError(f"{where}.method: required (vLLM would guess it from the model name; the deploy line must "
                         f"name the simulated method); expected one of {sorted(METHODS - MTP_ALIASES)}")
    if method not in METHODS:
        from traces.catalog import did_you_mean

        hint = did_you_mean(method, METHODS)
        raise ValueError(f"{where}.method: {method!r} is not a vLLM {VLLM_VERSION} method{hint}; expected one of "
                         f"{sorted(METHODS - MTP_ALIASES)}")
    if method in MTP_ALIASES:
        out["method"] = "mtp"  # vLLM rewrites the deprecated aliases (with a warning)
    if "num_speculative_tokens" in doc:
        _int(doc["num_speculative_tokens"], f"{where}.num_speculative_tokens", 1)
    if method in NEEDS_MODEL and not isinstance(doc.get("model"), str):
        raise ValueError(f"{where}.model: method {method!r} needs the draft model (a Hugging Face id or path)")
    if "draft_tensor_parallel_size" in doc:
        _int(doc["draft_tensor_parallel_size"], f"{where}.draft_tensor_parallel_size", 1)
    lookup = {k: doc[k] for k in ("prompt_lookup_min", "prompt_lookup_max") if k in doc}
    if method in NGRAM_METHODS:
        for key, value in lookup.items():
            _int(value, f"{where}.{key}", 1)
        lo = lookup.get("prompt_lookup_min", lookup.get("prompt_lookup_max", NGRAM_DEFAULT_LOOKUP))
        hi = lookup.get("prompt_lookup_max", lookup.get("prompt_lookup_min", NGRAM_DEFAULT_LOOKUP))
        if lo > hi:
            raise ValueError(f"{where}: prompt_lookup_min {lo} > prompt_lookup_max {hi}")
        out.update(prompt_lookup_min=lo, prompt_lookup_max=hi)
    elif lookup:
        raise ValueError(f"{where}.{next(iter(lookup))}: only n-gram methods take prompt lookup bounds (vLLM sets "
                         f"them to 0 for method {method!r})")
    if doc.get("rejection_sample_method", "standard") != "standard":
        raise ValueError(f"{where}.rejection_sample_method: expected 'standard' (the acceptance the plan replays is "
                         f"standard rejection sampling), got {doc['rejection_sample_method']!r}")
    if "num_speculative_tokens_per_batch_size" in doc:
        out["num_speculative_tokens_per_batch_size"] = check_schedule(
            doc["num_speculative_tokens_per_batch_size"], f"{where}.num_speculative_tokens_per_batch_size")
    return out


def _policy(policy: "PolicySpec | dict[str, Any] | None", where: str):
    import oracle.registry  # noqa: F401  (registers the ground-truth policies)
    from policies.registry import make_policy

    return make_policy(policy, where=where)


def schedule_of(ranges: list[tuple[int, int | None, int]], max_num_seqs: int) -> list[list[int]]:
    """draftsim's k-by-batch ranges as vLLM's schedule: an open last range ends at max_num_seqs (vLLM carries the
    last range's k on past its end, so any end >= its start runs the same k)."""
    return [[lo, hi if hi is not None else max(lo, max_num_seqs), k] for lo, hi, k in ranges]


def is_mtp_mode(mode) -> bool:
    """Whether a plan mode drafts with the target's MTP head: its drafter_model is a head (`TARGET:mtp`) or its
    speculative config names method mtp (or an alias)."""
    from traces.catalog import MTP_SUFFIX

    spec = mode.vllm_speculative_config or {}
    return bool(mode.drafter_model and mode.drafter_model.lower().endswith(MTP_SUFFIX)) or \
        spec.get("method") in MTP_ALIASES | {"mtp"}


def check_mtp(mode, target: str, where: str) -> int:
    """vLLM's rules for an MTP mode on `target`, with the plan's own: the target has an MTP head (vLLM's n_predict =
    config.json num_nextn_predict_layers, the catalog's mtp_layers), the mode's drafter_model is that head (its
    weights placed beside the target's), it runs sequential SD, and a deployable policy's k is within n_predict or
    a multiple of it (traces/mtp.py check_mtp_k). Returns n_predict."""
    from traces.catalog import MTP_SUFFIX, builtin_models, get_model
    from traces.mtp import check_mtp_k

    spec = get_model(target)
    if not spec.mtp_layers:
        capable = sorted(n for n, m in builtin_models().items() if m.mtp_layers)
        raise ValueError(f"{where}: an MTP mode drafts with the target's own MTP head, but the target {target!r} has "
                         f"none (num_nextn_predict_layers = 0 in the catalog); the catalog's MTP-capable models are "
                         f"{capable}")
    head = spec.name + MTP_SUFFIX
    if mode.drafter_model is None or mode.drafter_model.lower() != head.lower():
        raise ValueError(f"{where}.drafter_model: an MTP mode's drafter is the target's head: expected {head!r} (its "
                         f"weights and KV are placed beside the target's), got {mode.drafter_model!r}")
    if mode.mode != "sd":
        raise ValueError(f"{where}.mode: an MTP head runs inside the target's forward (colocated): expected sd, got "
                         f"{mode.mode!r}")
    given = (mode.vllm_speculative_config or {}).get("model")
    if given is not None and given != spec.hf_id:
        raise ValueError(f"{where}.vllm_speculative_config.model: an MTP mode drafts with the target's own head, in "
                         f"{spec.hf_id!r} (vLLM's default when model is left out), got {given!r}")
    policy = _policy(mode.policy, f"{where}.policy")
    from policies.base import FixedPolicy
    from policies.k_by_batch import KByBatchPolicy

    if isinstance(policy, (FixedPolicy, KByBatchPolicy)) and policy.max_draft_tokens() > 0:
        check_mtp_k(policy.max_draft_tokens(), spec.mtp_layers,
                    f"{where}.policy (vLLM {VLLM_VERSION} num_speculative_tokens of {target!r}'s MTP head)")
    return spec.mtp_layers


def check_mode(mode, where: str) -> None:
    """Static checks of a plan mode's vllm_speculative_config against its simulated policy (config load time)."""
    spec = mode.vllm_speculative_config
    if spec is None:
        return
    at = f"{where}.vllm_speculative_config"
    if mode.mode == "ar":
        raise ValueError(f"{at}: an AR mode runs no speculative decoding; drop it")
    if mode.mode == "psd":
        raise ValueError(f"{at}: PSD (MineDraft's two-batch pipeline, a vLLM 0.9.2 plugin) has no vLLM {VLLM_VERSION}"
                         " equivalent; a speculative config would deploy sequential SD, not what was simulated. PSD "
                         "candidates are research rows; drop it")
    cfg = check_speculative_config(spec, at)
    policy = _policy(mode.policy, f"{where}.policy")
    from policies.base import FixedPolicy
    from policies.k_by_batch import KByBatchPolicy

    if isinstance(policy, FixedPolicy) and policy.k == 0:
        raise ValueError(f"{at}: the simulated policy proposes k = 0 (autoregressive); drop it")
    if isinstance(policy, FixedPolicy):
        k = cfg.get("num_speculative_tokens", policy.k)
        if k != policy.k:
            raise ValueError(f"{at}.num_speculative_tokens: {k} but the simulated policy proposes k = {policy.k}; "
                             "the deploy line must run the k that was simulated")
        if "num_speculative_tokens_per_batch_size" in cfg:
            raise ValueError(f"{at}.num_speculative_tokens_per_batch_size: the simulated policy is a fixed k = "
                             f"{policy.k}; a batch-size schedule would deploy another policy")
    elif isinstance(policy, KByBatchPolicy):
        top = policy.max_draft_tokens()
        if cfg.get("num_speculative_tokens", top) != top:
            raise ValueError(f"{at}.num_speculative_tokens: {cfg['num_speculative_tokens']} but the simulated "
                             f"k-by-batch policy's largest k is {top} (vLLM caps every scheduled k by it)")
        given = cfg.get("num_speculative_tokens_per_batch_size")
        if given is not None:
            mine = schedule_of(policy.ranges, given[-1][1])
            if given != mine:
                raise ValueError(f"{at}.num_speculative_tokens_per_batch_size: {given} is not the simulated "
                                 f"policy's ranges {mine}; leave it out and the plan writes the simulated one")
    else:
        name = mode.policy.name if mode.policy is not None else None
        why = RESEARCH_POLICIES.get(name, f"policy {name!r} has no vLLM {VLLM_VERSION} equivalent")
        raise ValueError(f"{at}: {why}; the mode is planned as a research row and never deployed: drop it")


def deploy_of(mode, drafter_specs: dict[str, Any], tp: int, max_num_seqs: int, where: str,
              target: str | None = None) -> Deploy:
    """What vLLM runs for `mode` on a candidate of target TP `tp` and `max_num_seqs` (drafter_specs: the trace
    bundle's DrafterSpec per drafter name, for the drafter kind and the lookup bounds the acceptance assumed;
    target: the served catalog model, needed to check an MTP mode)."""
    if mode.mode == "ar":
        return Deploy(True, "autoregressive: no speculative config")
    if mode.mode == "psd":
        return Deploy(False, f"PSD (MineDraft's two-batch pipeline on a dedicated draft GPU) is not in vLLM "
                             f"{VLLM_VERSION} (a plugin of vLLM 0.9.2; a research row)")
    policy = _policy(mode.policy, f"{where}.policy")
    from policies.base import FixedPolicy
    from policies.k_by_batch import KByBatchPolicy

    if not isinstance(policy, (FixedPolicy, KByBatchPolicy)):
        name = policy.name
        return Deploy(False, RESEARCH_POLICIES.get(name, f"policy {name!r} has no vLLM {VLLM_VERSION} equivalent")
                      + " (a research row)")
    if policy.max_draft_tokens() == 0:
        return Deploy(True, "k = 0 everywhere: autoregressive, no speculative config")
    drafter = policy.drafter
    spec = drafter_specs.get(drafter)
    kind = getattr(spec, "kind", None)
    given = dict(mode.vllm_speculative_config or {})
    at = f"{where}.vllm_speculative_config"
    if not given and kind == "mtp":
        given = {"method": "mtp"}  # the target's own head: vLLM loads it from the target's checkpoint
    if not given:
        if kind != "ngram":
            return Deploy(False, f"no vllm_speculative_config given: the plan cannot name the draft model vLLM "
                                 f"would load for drafter {drafter!r} (kind {kind!r}); give one to deploy it")
        given = {"method": "ngram"}
    cfg = check_speculative_config(given, at)
    methods = KIND_METHODS.get(kind)
    if methods is None or cfg["method"] not in methods:
        raise ValueError(f"{at}.method: {cfg['method']!r} but the simulated drafter {drafter!r} replays acceptance of "
                         f"kind {kind!r}; expected one of {sorted(methods) if methods else 'none (no vLLM method)'}")
    if cfg["method"] == "mtp":
        if target is None:
            raise ValueError(f"{at}: method 'mtp' is checked against the target's MTP head; deploy_of needs the target")
        check_mtp(mode, target, where)
    params = getattr(spec, "params", {}) or {}
    if cfg["method"] in NGRAM_METHODS and "prompt_lookup_min" in params:
        recorded = (int(params["prompt_lookup_min"]), int(params["prompt_lookup_max"]))
        explicit = {k: given[k] for k in ("prompt_lookup_min", "prompt_lookup_max") if k in given}
        if explicit and (cfg["prompt_lookup_min"], cfg["prompt_lookup_max"]) != recorded:
            raise ValueError(f"{at}: prompt lookup bounds {explicit} but the replayed acceptance of {drafter!r} was "
                             f"recorded with prompt_lookup_min/max {recorded}; use those (or leave them out)")
        cfg.update(prompt_lookup_min=recorded[0], prompt_lookup_max=recorded[1])
    if cfg.get("draft_tensor_parallel_size") not in (None, 1, tp):
        raise ValueError(f"{at}.draft_tensor_parallel_size: {cfg['draft_tensor_parallel_size']} on a TP-{tp} "
                         f"candidate; vLLM accepts 1 or the target's TP")
    if isinstance(policy, FixedPolicy):
        cfg["num_speculative_tokens"] = policy.k
        return Deploy(True, f"fixed k = {policy.k}, method {cfg['method']}", cfg)
    cfg["num_speculative_tokens"] = policy.max_draft_tokens()
    cfg["num_speculative_tokens_per_batch_size"] = schedule_of(policy.ranges, max_num_seqs)
    return Deploy(True, f"k by batch size (vLLM's num_speculative_tokens_per_batch_size), method {cfg['method']}",
                  cfg)


def lookup_note(deploys: list[tuple[str, Deploy]], drafter_specs: dict[str, Any]) -> str | None:
    """The assumption a deploy line makes when the replayed n-gram acceptance records no lookup bounds."""
    unknown = sorted({f"{d.speculative_config['prompt_lookup_min']}/{d.speculative_config['prompt_lookup_max']}"
                      for _, d in deploys if d.speculative_config
                      and d.speculative_config.get("method") in NGRAM_METHODS})
    recorded = any("prompt_lookup_min" in (getattr(s, "params", {}) or {}) for s in drafter_specs.values())
    if not unknown or recorded:
        return None
    return (f"n-gram acceptance replayed without recorded prompt-lookup bounds; the deploy lines run "
            f"prompt_lookup_min/max {', '.join(unknown)} (vLLM {VLLM_VERSION}'s defaults when omitted: "
            f"{NGRAM_DEFAULT_LOOKUP}/{NGRAM_DEFAULT_LOOKUP}), assumed to be what the acceptance was measured with")
