"""Policies that read ground truth, closed-form bounds, and regret references."""
