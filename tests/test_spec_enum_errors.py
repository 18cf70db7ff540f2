"""An enum error names the value that was written, not only the allowed ones."""

from __future__ import annotations

import pytest

from tests.test_spec import BASE, edit, spec_error


@pytest.mark.parametrize(("old", "new", "written"), [
    ("- {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}",
     "- {provider: lambda, gpu: cpu, count: 1, price_usd_per_hour: 0.5}", "'lambda'"),
    ("- {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}",
     "- {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5, market: reserved}", "'reserved'"),
])
def test_enum_error_names_the_bad_value(old: str, new: str, written: str) -> None:
    assert old in BASE
    message = str(spec_error(edit(old, new)))
    assert "input should be" in message and f"not {written}" in message, message
