"""Experiment configs, the draftsim CLI, sweeps, reports and plots."""
