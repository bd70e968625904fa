"""One output rule for every writer (issue 34, harm classes 1-3 and 10), through the real CLI in a temp folder:
a single-file OUT that is a device stand-in (a FIFO), a link or the command's own input is refused and left as
it was; names from file content or flags never leave OUT; a user's folder, a link to one, `""`, `/` and a
bundle are refused; a second writer into a claimed folder is refused; a link loop is one error line; an
interrupted `compare` or `plan` leaves no result that looks complete. Nothing here can block: FIFOs are only
ever stat'ed (the timeout is a guard, not a bound)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments.cli_helpers import run_main_quietly

FIX = Path(__file__).parents[1] / "traces" / "fixtures"
ROOT = Path(__file__).parents[2]
PROM = ("vllm:spec_decode_num_drafts_total 200.0\nvllm:spec_decode_num_draft_tokens_total 600.0\n"
        "vllm:spec_decode_num_accepted_tokens_total 330.0\n")
pytestmark = pytest.mark.timeout(300)


def _tree(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (links and FIFOs by kind, files by content): what a refused command must not
    change."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = "link -> " + os.readlink(p)
        elif p.is_fifo():
            out[rel] = "fifo"
        elif p.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = p.read_bytes().hex()
    return out


def _single_file_writers(tmp: Path) -> dict[str, tuple[list[str], Path]]:
    """Commands that write one file -> (argv without OUT's value, their input file)."""
    (tmp / "m.txt").write_text(PROM)
    return {
        "import vllm-acceptance": (["import", "vllm-acceptance", str(tmp / "m.txt"), "{OUT}", "--k", "3"],
                                   tmp / "m.txt"),
        "bounds --plot": (["bounds", "--draft-time", "0.01", "--verify-time", "0.03", "--plot", "{OUT}"], None),
        "traces fit --out": (["traces", "fit", str(ROOT / "traces" / "data" / "default"), "--out", "{OUT}"], None),
    }


@pytest.mark.parametrize("target", ["fifo", "link-to-file", "dangling-link", "folder", "empty", "own-input"])
def test_class1_single_file_outputs_replace_only_regular_files(tmp_path, target):
    for name, (argv, src) in _single_file_writers(tmp_path).items():
        if target == "own-input" and src is None:
            continue
        keep = tmp_path / "keep.txt"
        keep.write_text("the user's file\n")
        out = {"fifo": tmp_path / "fifo", "link-to-file": tmp_path / "link", "dangling-link": tmp_path / "dangling",
               "folder": tmp_path / "folder", "empty": Path(""), "own-input": src}[target]
        if target == "fifo" and not out.exists():
            os.mkfifo(out)
        elif target == "link-to-file" and not out.is_symlink():
            out.symlink_to(keep)
        elif target == "dangling-link" and not out.is_symlink():
            out.symlink_to(tmp_path / "nowhere")
        elif target == "folder":
            out.mkdir(exist_ok=True)
        before = _tree(tmp_path)
        rc, err = run_main_quietly([str(out) if a == "{OUT}" else a for a in argv])
        assert rc != 0, (name, target)
        assert "Traceback" not in err and err.startswith("draftsim: error:"), (name, err)
        assert _tree(tmp_path) == before, (name, target)  # the FIFO is still a FIFO, the link still a link


def test_class1_a_new_path_and_an_earlier_output_are_written(tmp_path):
    (tmp_path / "m.txt").write_text(PROM)
    argv = ["import", "vllm-acceptance", str(tmp_path / "m.txt"), str(tmp_path / "a.yaml"), "--k", "3"]
    assert run_main_quietly(argv)[0] == 0
    assert run_main_quietly(argv)[0] == 0  # its own earlier output: a regular file, replaced atomically
    assert "mean_length: 2.65" in (tmp_path / "a.yaml").read_text()


def _bench_runs(tmp: Path, labels: list[str]) -> Path:
    doc = json.loads((FIX / "vllm_bench_detailed.json").read_text())
    lines = [json.dumps({**doc, "label": label, "request_rate": rate}) for label, rate in labels]
    (tmp / "runs.jsonl").write_text("\n".join(lines) + "\n")
    return tmp / "runs.jsonl"


@pytest.mark.parametrize("label", ["a/../../../x", "../..", "/abs/path", "..", "", "a\\..\\b", ".hidden"])
def test_class2_names_from_file_content_never_leave_out(tmp_path, label):
    work = tmp_path / "w" / "x" / "y"
    work.mkdir(parents=True)
    src = _bench_runs(tmp_path, [(label, "inf"), (label, 2.0)])
    outside_before = {p for p in tmp_path.rglob("*") if work / "out" not in p.parents}
    rc, err = run_main_quietly(["import", "vllm-bench", str(src), str(work / "out")])
    assert rc == 0, err
    outside_after = {p for p in tmp_path.rglob("*") if work / "out" not in p.parents and p != work / "out"}
    assert outside_after == outside_before  # nothing created beside or above OUT
    runs = sorted(p for p in (work / "out").iterdir() if not p.name.startswith("."))
    assert len(runs) == 2 and all((p / "run.json").is_file() for p in runs)


def test_class2_a_rate_that_is_not_a_number_is_refused_naming_the_input(tmp_path):
    src = _bench_runs(tmp_path, [("x", "../../r")])
    rc, err = run_main_quietly(["import", "vllm-bench", str(src), str(tmp_path / "out")])
    assert rc == 2 and str(src) in err and "request_rate" in err and "../../r" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [
    ["import", "minedraft", "{SRC}", "--out-dir", "{OUT}", "--name", "../../escape"],
    ["calibrate", "vllm", "--target", "smollm2-135m", "--out", "{OUT}", "--name", "../../escape", "--analyse-only"],
])
def test_class2_a_path_in_a_name_flag_is_refused_before_anything_is_written(tmp_path, argv):
    (tmp_path / "steps.jsonl").write_text("")
    before = _tree(tmp_path)
    rc, err = run_main_quietly([a.replace("{SRC}", str(tmp_path / "steps.jsonl"))
                                .replace("{OUT}", str(tmp_path / "a" / "b")) for a in argv])
    assert rc == 2 and "--name" in err, err
    assert _tree(tmp_path) == before


def _folder_writers(tmp: Path) -> dict[str, list[str]]:
    (tmp / "steps.jsonl").write_text("")
    return {"import vllm-bench": ["import", "vllm-bench", str(FIX / "vllm_bench_detailed.json"), "{OUT}"],
            "import guidellm": ["import", "guidellm", str(FIX / "guidellm_benchmarks.json"), "{OUT}"],
            "import minedraft": ["import", "minedraft", str(tmp / "steps.jsonl"), "--out-dir", "{OUT}", "--name", "p"],
            "compare --out": ["compare", str(tmp / "no-such-run"), "default", "--out", "{OUT}"]}


@pytest.mark.parametrize("target", ["user-folder", "link-to-empty-folder", "empty-string", "bundle", "holds-input"])
def test_class3_folder_writers_never_write_into_a_users_folder(tmp_path, target, monkeypatch):
    from traces.bundle import load_bundle

    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # `""` is the working folder: it must stay empty

    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    bundle = tmp_path / "bundle"
    from traces.bundle import save_bundle

    save_bundle(load_bundle(ROOT / "traces" / "data" / "default"), bundle)
    for name, argv in _folder_writers(tmp_path).items():
        out = {"user-folder": str(user), "link-to-empty-folder": str(tmp_path / "link"), "empty-string": "",
               "bundle": str(bundle), "holds-input": str(tmp_path)}[target]
        before = _tree(tmp_path)
        rc, err = run_main_quietly([out if a == "{OUT}" else a for a in argv])
        assert rc != 0, (name, target)
        assert "results folder" in err or "output folder" in err, (name, err)
        assert _tree(tmp_path) == before, (name, target)
    load_bundle(bundle)  # still loads


def test_class3_root_and_empty_paths_are_not_folders():
    from experiments.output_folder import claim_output_folder
    from experiments.report import check_results_target

    for bad in ("/", "", "  "):
        with pytest.raises(ValueError, match="root folder|empty path"):
            check_results_target(bad, None)
        with pytest.raises(ValueError, match="root folder|empty path"):
            claim_output_folder(bad, None)


def test_class3_a_second_writer_into_a_claimed_folder_is_refused(tmp_path):
    from experiments.output_folder import claim_output_folder

    out = tmp_path / "sweep"
    code = ("import sys; from experiments.output_folder import claim_output_folder; "
            f"claim_output_folder({str(out)!r}, None); print('held', flush=True); sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ValueError, match="another draftsim command is writing into it"):
            claim_output_folder(out, None)
    finally:
        holder.communicate("\n", timeout=60)
    assert claim_output_folder(out, None) == out.resolve()  # free again once the first command exited


def test_class10_a_link_loop_is_one_error_line(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "trace.yaml").symlink_to("trace.yaml")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for argv in (["traces", "stats", str(tmp_path / "b")],
                 ["import", "guidellm", str(FIX / "guidellm_benchmarks.json"), str(tmp_path / "loop" / "x")]):
        rc, err = run_main_quietly(argv)
        assert rc != 0 and "Traceback" not in err and "RuntimeError" not in err, err


def test_class10_compare_that_fails_while_writing_leaves_no_results_folder(tmp_path, monkeypatch):
    import experiments.validate_report as vr
    from traces.importers.vllm_bench import import_vllm_bench
    from traces.measured_run import save_measured

    (run,) = import_vllm_bench(FIX / "vllm_bench_detailed.json")
    save_measured(run, tmp_path / "m")

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device", "cdf-AR.png")

    monkeypatch.setattr(vr, "plot_cdfs", full_disk)
    rc, err = run_main_quietly(["compare", str(tmp_path / "m"), "default", "--runs", "AR", "--repeats", "1",
                                "--out", str(tmp_path / "cmp")])
    assert rc != 0 and "No space left" in err
    assert not (tmp_path / "cmp").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".cmp")] == []  # its temp folder is gone


def test_class10_a_plan_whose_plots_fail_holds_no_plan_json(tmp_path, monkeypatch):
    import experiments.plan.report as plan_report
    from experiments.plan.config import load_plan_config
    from experiments.plan.planner import run_plan
    from tests.experiments.test_plan import make_known_case

    case = make_known_case(tmp_path)
    case["search"] = {**case["search"], "seeds": 1, "curve_fractions": [0.5]}
    out = tmp_path / "plan"
    run_plan(load_plan_config(case), out, backend="serial", progress=False)
    assert (out / "plan.json").is_file()

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device", "curves.png")

    monkeypatch.setattr(plan_report, "write_plots", full_disk)
    with pytest.raises(OSError):
        run_plan(load_plan_config(case), out, backend="serial", progress=False)
    assert not (out / "plan.json").exists()  # no plan.json that could be taken for this run's complete result
