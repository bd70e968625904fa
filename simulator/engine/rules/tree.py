"""Tree drafting rules: a step's accepted drafts from the drafters' rank rows (traces/tree.tree_accepted per
sequence) and the drafting phase of a static tree, priced one drafter pass per depth.

A step that verifies a tree of N nodes is otherwise a chain step of N drafts: the target verifies N + 1 tokens per
sequence, KV is reserved for them and the request's context grows by the emitted tokens only (the rejected nodes'
slots hold nothing afterwards and the next step's drafts reuse them, as a chain's rejected drafts' slots are)."""
from __future__ import annotations

from simulator.engine.rules.pricing import DRAFT_AUTOREGRESSIVE, draft_time, profile_price
from traces.tree import tree_accepted


def accept_tree(parent, rank, ranks, slot, flat, proposed, n, out):
    """Accepted drafts of n sequences: sequence j verifies the tree's first proposed[j] nodes (nodes in depth
    order, so any leading part is itself a tree: vLLM V1's decode budget may cut it) against its drafter's rank
    row ranks[slot[j], flat[j]] (ranks: drafter slots x flat positions x depth), into out[j]. Returns their sum."""
    total = 0
    for j in range(n):
        m = proposed[j]
        a = tree_accepted(parent[:m], rank[:m], ranks[slot[j], flat[j]]) if m > 0 else 0
        out[j] = a
        total += a
    return total


def tree_draft_time(cost, profile, num_seqs, proposed_tokens, pass_tokens, kv_tokens, verify_time):
    """Drafting a static tree for `num_seqs` sequences proposing `proposed_tokens` nodes in all: an autoregressive
    drafter makes one pass per depth j, reading the pass_tokens[j] nodes of depth j that have children (the root
    for j = 0) of every sequence, over KV grown by the nodes read in the passes before; the other cost kinds price
    the proposal as rules.pricing.draft_time does (depth = its k_max). The phase's host seconds (`host_s`) once, as
    draft_time adds them. A chain of k (pass_tokens all 1) costs what draft_time charges for k."""
    if cost.kind != DRAFT_AUTOREGRESSIVE:
        return draft_time(cost, profile, num_seqs, proposed_tokens, len(pass_tokens), kv_tokens, verify_time)
    if num_seqs <= 0 or proposed_tokens <= 0:
        return 0.0
    total = 0.0
    read = 0
    for j in range(len(pass_tokens)):
        total += profile_price(profile, num_seqs, num_seqs * pass_tokens[j], kv_tokens + read * num_seqs)
        read += pass_tokens[j]
    return total + cost.host_s
