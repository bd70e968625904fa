"""SimPy engine of an LLM server doing speculative decoding, and its cost models (docs/architecture.md).

Rooms: engine/ (the step rules and the SimPy driver), costs/ (profiles, roofline, draft costs, placement),
cluster/ (replicas behind a router), measure/ (metrics, steady state, early stop, timeline), reproductions/
(SpecDecode-Bench). Here: server_config.py (validated config blocks and the resolved Scenario), scenario.py
(config -> scenario -> inputs -> simulation), seeds.py (the seed tree).
"""
