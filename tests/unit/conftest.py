"""A bare API server per test module (no controllers), and clients of it as the admin and
as RHOAI's pipeline-runner. Modules that need another set-up define their own `api`."""

from __future__ import annotations

import pytest

from tests.unit.apiserver_kit import api_client, start_api


@pytest.fixture(scope="module")
def api(tmp_path_factory, request):
    srv = start_api(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    yield srv
    srv.stop()


@pytest.fixture
def admin(api):
    return api_client(api, api.auth.admin)


@pytest.fixture
def runner(api):
    return api_client(api, api.auth.pipeline_runner)


@pytest.fixture
def as_runner(api, tmp_path, monkeypatch):
    """kfp_ray's kube access as pipeline-runner through a kubeconfig (namespace sandbox), as in a task."""
    import yaml

    from kfp_ray import kube

    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "runner",
           "clusters": [{"name": "bare", "cluster": {"server": api.url, "certificate-authority": api.ca_file}}],
           "users": [{"name": "runner", "user": {"token": api.auth.pipeline_runner.token}}],
           "contexts": [{"name": "runner", "context": {"cluster": "bare", "user": "runner", "namespace": "sandbox"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    monkeypatch.setenv("KUBECONFIG", str(path))
    kube.api_client.cache_clear()
    yield
    kube.api_client.cache_clear()
