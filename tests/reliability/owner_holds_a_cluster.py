"""A pytest run that holds a Ray cluster until it is signalled: the pytest owner of
tests/reliability/test_owner_death.py, which runs this file on its own (its name keeps it out of
the suite's collection; it skips unless KFP_RAY_HOLD_MARKER is set)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from kubernetes import client as k8s

from kfp_ray_sandbox.reaper import wait_interruptibly
from tests.helpers import eventually, raycluster

HOLD_S = 3600.0  # a signal ends it long before


@pytest.mark.skipif("KFP_RAY_HOLD_MARKER" not in os.environ, reason="run by test_owner_death.py only")
def test_hold_a_cluster(sbx):
    co = k8s.CustomObjectsApi(sbx.api_client())
    co.create_namespaced_custom_object("ray.io", "v1", sbx.namespace, "rayclusters",
                                       raycluster("held", workers=0, memory="1Gi"))
    eventually(lambda: (co.get_namespaced_custom_object("ray.io", "v1", sbx.namespace, "rayclusters", "held")
                        .get("status") or {}).get("state") == "ready", 180, 0.25, what="RayCluster held to be ready")
    Path(os.environ["KFP_RAY_HOLD_MARKER"]).write_text("holding\n")
    wait_interruptibly(threading.Event(), HOLD_S)  # a signal ends it: SIGTERM/SIGINT raise KeyboardInterrupt
