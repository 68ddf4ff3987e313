"""The fault matrix's `recorder`: each row's measurements, for the summary table
(tests/reliability/summary.py)."""

from __future__ import annotations

import pytest

from tests.reliability.summary import Recorder


@pytest.fixture
def recorder(request):
    return Recorder(request.node)
