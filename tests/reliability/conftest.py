"""The fault matrix's `recorder`: each row's measurements, for the summary table
(tests/reliability/summary.py); `guard`, the watchdog of the owners a test starts."""

from __future__ import annotations

import pytest

from tests.reliability.summary import Recorder


@pytest.fixture
def recorder(request):
    return Recorder(request.node)


@pytest.fixture(scope="module")
def guard():
    """A watchdog of this test process for the owners its tests start in sessions of their own
    (owner-death, benchmark owners): launched with `guard.env()`, an owner and all it started go
    if the test process dies (an xdist worker SIGKILLed, or exiting at once on SIGTERM), as its
    own watchdog would not: that one watches the owner, which would live on."""
    from kfp_ray_sandbox.reaper import Watchdog

    wd = Watchdog().start()
    try:
        yield wd
    finally:
        wd.close()
