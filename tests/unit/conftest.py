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
