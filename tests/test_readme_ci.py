"""The README's two commands are the ones CI runs."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_ci_installs_what_the_readme_says_and_runs_its_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = _code_blocks(readme)
    install = next(b for b in blocks if "pip install" in b)
    test = next(b for b in blocks if "pytest" in b)
    for cmd in re.findall(r"pip install[^&\n]*", install):
        assert cmd.strip() in ci, f"CI does not run the README's install step: {cmd.strip()}"
    assert test.strip() in ci, f"CI does not run the README's test command: {test.strip()}"
