"""Settings shared by the engine's tests."""
from __future__ import annotations

from hypothesis import Phase, settings

# `pytest --hypothesis-profile=rules-no-shrink`: report a failing drawn case without shrinking it (the mutation
# check of MUTATIONS.md only needs to know which rule test fails)
settings.register_profile("rules-no-shrink", phases=[Phase.explicit, Phase.reuse, Phase.generate])
