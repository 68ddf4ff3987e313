"""Fixtures of the command line's tests against the sandbox's Data Science Pipelines server."""

from __future__ import annotations

import pytest

from kfp_ray_sandbox.client import SandboxClient


@pytest.fixture
def server_env(box, monkeypatch):
    """What a user has after `oc login` (a kubeconfig) and sets: the route and the token, here the sandbox's."""
    token = SandboxClient(box.info).token()
    monkeypatch.setenv("KUBECONFIG", box.info["kubeconfig"])
    monkeypatch.setenv("KFP_HOST", box.info["pipelines_api"])
    monkeypatch.setenv("KFP_TOKEN", token)
    monkeypatch.setenv("KFP_CA_BUNDLE", box.info["ca_file"])
    return token


@pytest.fixture
def kfp_client(box, server_env):
    import kfp

    return kfp.Client(host=box.info["pipelines_api"], existing_token=server_env, ssl_ca_cert=box.info["ca_file"])
