"""No file's content in an error (issue 34, harm class 6): a path that names the wrong file, or a link to another
file (a credentials file, say), fails with a message naming the path and what was expected, and none of that
file's text. Checked through the CLI for every kind of file a config or flag points at."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.experiments.cli_helpers import run_main_quietly
from traces.errors import shorten

SECRET = "SECRET-TOKEN-7f3a9c"
SECRET_FILES = {  # shapes a sensitive file may have
    "yaml mapping": f"api_key: {SECRET}\npassword: {SECRET}x\n",
    "yaml list": f"- {SECRET}\n- other\n",
    "plain lines": f"{SECRET}\nroot:x:0:0:root:/root:/bin/bash\n",
    "env file": f"API_KEY={SECRET}\n",
    "json": json.dumps({"token": SECRET, "nested": {"k": [SECRET]}}),
    "model-like mapping": f"h100-80gb: {SECRET}\nkind: {SECRET}\nmeasured_k: {SECRET}\n",
}


def _commands(tmp: Path, secret: Path) -> dict[str, list[str]]:
    acc_cfg = yaml.safe_load((Path(__file__).parents[2] / "experiments" / "configs" / "default.yaml").read_text())
    acc_cfg["traces"] = {"acceptance": {"drafters": {"eagle3": {"file": str(secret)}}}}
    (tmp / "acc.yaml").write_text(yaml.safe_dump(acc_cfg))
    return {
        "target_profile": ["run", "default", "--set", f"server.target_profile={secret}", "--out", str(tmp / "r1")],
        "acceptance file": ["run", str(tmp / "acc.yaml"), "--out", str(tmp / "r2")],
        "--prices": ["plan", "plan_llama8b", "--prices", str(secret), "--out", str(tmp / "p")],
        "vllm metrics": ["import", "vllm-metrics", str(secret)],
        "vllm-acceptance": ["import", "vllm-acceptance", str(secret), str(tmp / "a.yaml"), "--k", "3"],
        "guidellm report": ["import", "guidellm", str(secret), str(tmp / "g")],
        "vllm bench result": ["import", "vllm-bench", str(secret), str(tmp / "b")],
        "specbench traces": ["import", "specbench", str(secret), str(tmp / "s")],
    }


@pytest.mark.parametrize("shape", sorted(SECRET_FILES))
def test_class6_errors_name_the_file_but_never_print_its_content(tmp_path, shape):
    real = tmp_path / "credentials"
    real.write_text(SECRET_FILES[shape])
    link = tmp_path / "profile.yaml"
    link.symlink_to(real)  # what a config names; a link to another file
    for what, argv in _commands(tmp_path, link).items():
        rc, err = run_main_quietly(argv)
        assert rc != 0, (what, shape)
        assert SECRET not in err and "root:x:0" not in err, (what, shape, err)
        assert "Traceback" not in err, (what, err)


@pytest.mark.parametrize("value", ["sk-abc", "", "x" * 10_000, ["a", SECRET], {"k": SECRET}, b"bytes", object()])
def test_shorten_describes_text_and_containers_without_quoting_them(value):
    shown = shorten(value)
    assert SECRET not in shown and "sk-abc" not in shown and len(shown) < 60


@pytest.mark.parametrize("value", [1.5, -3, 10**40, True, None, float("nan")])
def test_shorten_shows_numbers_as_written(value):
    shown = shorten(value)
    assert shown == repr(value) or shown.startswith(repr(value)[:80])
