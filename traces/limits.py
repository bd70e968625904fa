"""Upper bounds on sizes an input may ask for, so that a typo fails at load time, not as an overflow or a
terabyte allocation deep inside a run. Each bound is far above any real workload."""
from __future__ import annotations

MAX_TOKENS_PER_REQUEST = 1 << 24  # 16,777,216 prompt or output tokens in one request
MAX_NUM_REQUESTS = 10_000_000  # requests in one workload (a run of that many takes hours)
MAX_DRAFT_TOKENS = 64  # tokens a policy may propose per sequence and step (k)
MAX_REPLICAS = 1024  # replicas of one simulated cluster (each is a whole simulated server)
# replicas x requests of one cluster simulation: every replica keeps its per-request state arrays for the whole
# workload (~20 numbers a request), so 50M slots take ~8 GB; a plan at 1,024 replicas fits ~48,000 requests
MAX_CLUSTER_SLOTS = 50_000_000
MAX_PLAN_CANDIDATES = 10_000  # deployments one capacity plan searches (each takes several simulations)
MAX_SWEEP_POINTS = 10_000  # points of one sweep (checked before the points are expanded)
MAX_SECONDS = 1e7  # one measured time (a send time, TTFT, E2E latency): about 116 days
MAX_TEXT_BYTES = 1 << 28  # 256 MiB: one YAML/JSON/text input file read whole
MAX_LINE_BYTES = 1 << 28  # 256 MiB: one JSONL line (a 16M-token request's lists fit)
