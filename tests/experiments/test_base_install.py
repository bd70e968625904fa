"""Base-install commands never import an optional dependency: every non-calibration module, and the base commands
run for real on small inputs, in a fresh interpreter where torch, transformers, tqdm, ray and vllm cannot be
imported (as after `pip install -e '.[test]'`). `draftsim psd-report`'s old runner crashed here on tqdm."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("torch", "transformers", "tqdm", "ray", "vllm")
BASE_PACKAGES = ("traces", "policies", "oracle", "simulator", "experiments")

# sys.modules[name] = None makes `import name` (and `import name.sub`) raise ModuleNotFoundError; the checkout's
# own packages come first on the path (the probe script lives in a temporary folder)
BLOCK = "import sys\nsys.path.insert(0, {root!r})\nfor _n in {names!r}:\n    sys.modules[_n] = None\n"


def _run_blocked(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "probe.py"
    script.write_text(BLOCK.format(root=str(ROOT), names=OPTIONAL) + code)
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True)


def test_the_block_itself_works(tmp_path):
    res = _run_blocked("import experiments\nprint(experiments.__file__)\nimport tqdm\n", tmp_path)
    assert res.returncode != 0 and "ModuleNotFoundError" in res.stderr
    assert res.stdout.strip() == str(ROOT / "experiments" / "__init__.py")  # this checkout, not an installed copy


def test_every_base_module_imports_without_optional_dependencies(tmp_path):
    code = f"""
import importlib, pkgutil
bad = []
for pkg in {BASE_PACKAGES!r}:
    mod = importlib.import_module(pkg)
    for info in pkgutil.walk_packages(mod.__path__, pkg + "."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            bad.append(f"{{info.name}}: {{e}}")
print("BAD", bad)
assert not bad, bad
"""
    res = _run_blocked(code, tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def _commands(tmp: Path) -> list[list[str]]:
    trace = tmp / "combined_gsm8k.jsonl"
    trace.write_text("".join(json.dumps({"id": str(i), "prompt_token_ids": [1] * 6, "generated_token_ids": [2] * 5,
                                         "acc_eagle": {"acc_len": [1, 3, 1, 2, 1]},
                                         "acc_ngram": {"acc_len": [2, 1, 1, 1, 1]}}) + "\n" for i in range(4)))
    bounds = ["--set", "traces.synthetic.num_requests=30", "--set", "server.max_num_seqs=2",
              "--set", "traces.synthetic.categories.bounds.output={dist: uniform, low: 16, high: 32}",
              "--set", "sweep.grid={workload.arrival: [{kind: closed_loop, clients: 4}]}",
              "--set", "sweep.zip={drafters.const.fraction: [1.0], server.target_profile.coefficients.const: [0.02]}"]
    return [
        ["--help"],
        ["run", "default", "--no-out", "--no-progress", "--json", "--set", "workload.num_requests=10"],
        ["run", "default", "--out", str(tmp / "run"), "--no-progress", "--set", "workload.num_requests=10"],
        ["sweep", "psd_bounds", "--backend", "serial", "--no-progress", "--out", str(tmp / "b"), *bounds],
        ["psd-report", "psd_bounds", "--results", str(tmp / "b"), "--json", *bounds],
        ["bounds", "--draft-time", "0.01", "--verify-time", "0.02", "--json"],
        ["bounds", "--frontier", "--alpha-v", "1.5", "--plot", str(tmp / "frontier.png")],
        ["placement", "--target", "llama3.1-8b", "--gpu", "h100-80gb", "--json"],
        ["policies", "--json"],
        ["traces", "validate", str(ROOT / "traces" / "data" / "bundles" / "smollm2-135m-instruct-chat")],
        ["import", "specbench", str(trace), str(tmp / "bundle")],
        ["specbench", "--trace", str(trace), "--proposer", "eagle3", "--predict", "FIXED_3", "--batch-size", "2",
         "--num-requests", "4", "--json"],
    ]


def test_base_commands_run_without_optional_dependencies(tmp_path):
    argv = _commands(tmp_path)
    code = f"""
import contextlib, io
from experiments.cli import main
for argv in {argv!r}:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(argv)
        except SystemExit as e:  # --help
            rc = e.code
    print("RC", rc, argv[0])
    assert rc == 0, (rc, argv)
"""
    res = _run_blocked(code, tmp_path)
    assert "ModuleNotFoundError" not in res.stderr, res.stderr[-3000:]
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert res.stdout.count("RC 0") == len(argv)
