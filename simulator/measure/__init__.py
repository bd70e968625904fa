"""Measuring runs: metrics.py (summary figures), steady_state.py (the steady window and overload check),
early_stop.py (stopping a run once its answer is known), timeline.py (Chrome trace export)."""
