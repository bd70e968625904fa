"""Replicas behind a router: simulation.py (ClusterSimulation, one Environment for all replicas), router.py (the
routing rules), config.py (the validated cluster block)."""
