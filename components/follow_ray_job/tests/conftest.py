"""The follow tests' loopback stand-in for a Ray head's dashboard (dashboard.py)."""

from __future__ import annotations

import pytest

from kfp_ray.components.follow_ray_job.tests.dashboard import Dashboard


@pytest.fixture
def dashboard():
    d = Dashboard()
    yield d
    d.close()
