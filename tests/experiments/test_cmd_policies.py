"""`draftsim policies`: the listing names every policy with defaults; make-pool writes a loadable bundle."""
import json

from experiments.cli import main
from policies.registry import POLICIES
from traces.bundle import load_bundle


def test_listing_names_every_policy_with_defaults(capsys):
    assert main(["policies", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert {e["name"] for e in entries} == set(POLICIES)
    ucb = next(e for e in entries if e["name"] == "metasd-ucb")
    assert ucb["parameters"]["beta"] == 1.0 and ucb["parameters"]["drafters"] == "<required>"
    assert all(e["description"] for e in entries)
    assert next(e for e in entries if e["name"] == "oracle-k")["oracle"] is True


def test_text_listing(capsys):
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    assert "sliding-window-ucb" in out and "[oracle]" in out and "window=50" in out


def test_make_pool_writes_a_valid_bundle(tmp_path, capsys):
    assert main(["policies", "make-pool", str(tmp_path / "p"), "--requests", "5", "--drift", "--min-len", "30",
                 "--max-len", "40"]) == 0
    b = load_bundle(tmp_path / "p")
    assert len(b.requests) == 5 and "segments" in b.meta.extra
