"""Online drafter/k policies behind one interface (never imports SimPy)."""
from policies.base import NO_DRAFT, BatchFeedback, BatchView, Choice, Feedback, FixedPolicy, Policy, RequestView

__all__ = ["NO_DRAFT", "BatchFeedback", "BatchView", "Choice", "Feedback", "FixedPolicy", "Policy", "RequestView"]
