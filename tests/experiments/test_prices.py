"""GPU price table: every catalog GPU has a sourced price; user files and overrides are checked."""
from __future__ import annotations

import pytest

from experiments.plan.prices import load_price_file, price_table
from traces.catalog import builtin_gpus


def test_builtin_table_prices_every_catalog_gpu_with_a_source():
    table = price_table()
    assert set(builtin_gpus()) <= set(table)
    assert all(p.usd_per_hour > 0 and p.source for p in table.values())


def test_overrides_replace_and_say_so(tmp_path):
    table = price_table(overrides={"H100-80GB": 2.25}, where="plan.prices")
    assert table["h100-80gb"].usd_per_hour == 2.25 and table["h100-80gb"].source == "override in plan.prices"
    with pytest.raises(ValueError, match=r"plan.prices.usd_per_gpu_hour.l40s: expected a positive number"):
        price_table(overrides={"l40s": 0}, where="plan.prices")


@pytest.mark.parametrize("text, message", [
    ("a100-80gb: {usd_per_hour: 1.0}\n", "a100-80gb.source: say where the price comes from"),
    ("a100-80gb: {usd_per_hour: -1, source: x}\n", "a100-80gb.usd_per_hour: expected a positive number"),
    ("a100-80gb: {usd: 1, source: x}\n", "a100-80gb: expected {usd_per_hour"),
    ("[1, 2]\n", "non-empty mapping"),
])
def test_bad_price_files_name_the_file_and_entry(tmp_path, text, message):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        load_price_file(path)
    assert str(path) in str(err.value)
