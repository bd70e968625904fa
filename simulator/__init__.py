"""SimPy engine of an LLM server doing speculative decoding, and its cost models."""
