"""The engine's step rules, each written once as plain Python over numpy arrays and scalars (docs/architecture.md).

The step path calls these functions (compiled with numba's njit, or plain under NUMBA_DISABLE_JIT=1) and the
compiled kernel compiles the same functions into its loop, so editing a rule changes what every path runs.
"""
