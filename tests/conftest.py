"""Suite-wide setup: the fitted-spec disk cache lives in a fresh temporary folder, never in the user's home."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_draftsim_cache(tmp_path_factory):
    old = os.environ.get("DRAFTSIM_CACHE_DIR")
    os.environ["DRAFTSIM_CACHE_DIR"] = str(tmp_path_factory.mktemp("draftsim-cache"))
    yield
    if old is None:
        os.environ.pop("DRAFTSIM_CACHE_DIR", None)
    else:
        os.environ["DRAFTSIM_CACHE_DIR"] = old
