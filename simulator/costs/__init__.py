"""Step prices: latency profiles (latency.py: linear, table, step model; roofline.py), drafters' costs
(draft_cost.py), the structured step model and its records (step_model.py, profile_records.py) and model placement
on GPUs (placement.py)."""
