"""Sweeps: grid and random points over config keys, run serially, on a process pool or on Ray, with
per-point seeds from content hashes and a resumable per-point cache."""
