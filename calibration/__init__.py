"""Real-model measurement of step latencies and acceptance traces, and live runs."""
