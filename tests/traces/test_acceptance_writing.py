"""Importers never write an acceptance file that is impossible or that loading refuses (issue 34, harm class 7):
save_source checks with the loader's own rules first. Invariant, over drawn sources: either nothing is written
and the error names the field, or the file loads back as the same source."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.experiments.cli_helpers import run_main_quietly
from traces.acceptance_levels import AcceptanceSource, load_source, save_source
from traces.limits import MAX_DRAFT_TOKENS


def _prom(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float] = ()) -> str:
    lines = [f"vllm:spec_decode_num_drafts_total {drafts}", f"vllm:spec_decode_num_draft_tokens_total {draft_tokens}",
             f"vllm:spec_decode_num_accepted_tokens_total {accepted}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}' for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


CLI_CASES = {  # counters, --k, the field the refusal names
    "mean length 5 at k = 3": (_prom(100, 1000, 400), "3", "mean_length"),
    "k = 2**62": (_prom(100, 300, 150), str(2**62), "measured_k"),
    "k = 65": (_prom(100, 300, 150), "65", "measured_k"),
    "rates at the wrong k": (_prom(100, 300, 150, [60, 50, 40]), "2", "per-position"),
    "rates that increase": (_prom(100, 300, 150, [40, 60, 50]), "3", "per-position"),
}


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_class7_importer_refuses_impossible_acceptance_and_writes_nothing(tmp_path, case):
    text, k, field = CLI_CASES[case]
    (tmp_path / "m.txt").write_text(text)
    rc, err = run_main_quietly(["import", "vllm-acceptance", str(tmp_path / "m.txt"), str(tmp_path / "a.yaml"),
                                "--k", k])
    assert rc == 2 and field in err and "Traceback" not in err, err
    assert not (tmp_path / "a.yaml").exists()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k=st.one_of(st.integers(-2, MAX_DRAFT_TOKENS + 2), st.just(2**62)),
       mean=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64), st.floats(0.5, 70)),
       per_pos=st.one_of(st.none(), st.lists(st.floats(-0.2, 1.2), max_size=8)))
def test_class7_what_is_saved_loads_back_and_nothing_else_is_written(tmp_path, k, mean, per_pos):
    path = tmp_path / "a.yaml"
    path.unlink(missing_ok=True)
    src = AcceptanceSource(k, mean, per_pos, source={"format": "test"})
    possible = (1 <= k <= MAX_DRAFT_TOKENS and (mean is not None or per_pos is not None)
                and (mean is None or (math.isfinite(mean) and 1 <= mean <= k + 1))
                and (per_pos is None or (len(per_pos) == k and all(0 <= x <= 1 for x in per_pos)
                                         and all(b <= a + 1e-12 for a, b in zip(per_pos, per_pos[1:])))))
    try:
        save_source(src, path)
    except ValueError:
        assert not possible, (k, mean, per_pos)
        assert not path.exists()
        return
    assert possible, (k, mean, per_pos)
    back = load_source(path)
    assert (back.measured_k, back.mean_length, back.per_position) == (k, mean, per_pos)
