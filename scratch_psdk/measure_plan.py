"""One-off (psdk): time the PSD candidates of plan_llama8b on h100 TP 1."""
import sys, tempfile, time, resource
import yaml
from experiments.plan.config import load_plan_config
from experiments.plan.planner import run_plan

doc = yaml.safe_load(open("experiments/configs/plan_llama8b.yaml"))
c = doc["candidates"]
c["gpus"], c["tp"] = ["h100-80gb"], [1]
c["modes"] = [m for m in c["modes"] if m["mode"] == "psd"][: int(sys.argv[1]) if len(sys.argv) > 1 else 1]
with tempfile.TemporaryDirectory() as d:
    t0, c0 = time.time(), time.process_time()
    res = run_plan(load_plan_config(doc), d, backend="serial")
    print("wall", round(time.time() - t0, 2), "cpu", round(time.process_time() - c0, 2))
    print("stats", res.get("_stats"))
    for c in res.get("candidates", []):
        print(c.get("id") or c.get("name"), c.get("mode"), c.get("max_rate_req_s"), c.get("interval_req_s"),
              c.get("engine_path"))
