"""Realism that costs minutes and repeats what another test already covers: run only with
KFP_RAY_TEST_FULL=1 (docs/testing.md), so that `make test` stays under 20 minutes on 2 cores."""

from __future__ import annotations

import os

import pytest

FULL = os.environ.get("KFP_RAY_TEST_FULL") == "1"


def full_only(covered_by: str):
    """Mark a test (or a pytest.param) to run only under KFP_RAY_TEST_FULL=1; `covered_by` names
    the tests that cover its ground in every run."""
    return pytest.mark.skipif(not FULL, reason=f"KFP_RAY_TEST_FULL=1 runs it; every run covers it by {covered_by}")
