"""Test helper run as `python -m tests.calibration.vllm_steps.spawn_tree PLAN OUT`: starts a grandchild that would sleep
for a minute, writes its pid to OUT, then hangs (like a vLLM engine core that never returns)."""
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path(sys.argv[2]).with_suffix(".pid").write_text(str(child.pid))
    if "fail" in Path(sys.argv[1]).read_text():
        sys.exit(3)
    time.sleep(60)
