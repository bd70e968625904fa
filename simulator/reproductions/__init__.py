"""Reproductions of published setups: specbench.py (SpecDecode-Bench's closed-batch compatibility mode)."""
