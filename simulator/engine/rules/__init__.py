"""The engine's step rules, each written once as plain Python over numpy arrays and scalars (docs/architecture.md).

The kernels (compiled_kernel.py, compiled_psd_kernel.py) compile these functions into their loops (plain Python
under NUMBA_DISABLE_JIT=1), so editing a rule changes what every run does.
"""
