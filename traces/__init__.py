"""File formats, workloads, acceptance traces, latency-profile data and catalogs (imports nothing of ours)."""
