"""Registers the ground-truth policies (oracles) in the policy registry; the experiment layer imports this.

`policies/` sits below `oracle/` in the layering and cannot import these classes itself.
"""
from __future__ import annotations

from oracle.best_drafter import OracleBestDrafterPolicy
from oracle.combine import OracleCombinePolicy
from oracle.hindsight import BestFixedInHindsightPolicy
from oracle.oracle_k import OracleKPolicy
from policies.registry import GROUND_TRUTH_POLICIES, register_policy

ORACLE_POLICIES = (OracleKPolicy, OracleBestDrafterPolicy, OracleCombinePolicy, BestFixedInHindsightPolicy)
if {cls.name for cls in ORACLE_POLICIES} != set(GROUND_TRUTH_POLICIES):
    raise RuntimeError("policies.registry.GROUND_TRUTH_POLICIES must name exactly the classes oracle/ registers")
for _cls in ORACLE_POLICIES:
    register_policy(_cls)
