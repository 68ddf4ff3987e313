"""What the run report knows of a run beyond its results.json, read where the run is: its
tasks' real start and end times (the run's task pods, postmortem.py), the run's page in the
KFP UI (the DSPA's UI Route), an S3 console link for a location, the Ray version. Each is best
effort: a single try with a request timeout, and what cannot be read is left out, with why."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from .wait import first_line

# The Ray version in an image's tag: quay.io/modh/ray:2.52.1-py311-cu121, rayproject/ray:2.52.1
_RAY_TAG = re.compile(r"(?:^|/)ray(?:-[\w.-]+)?:(\d+\.\d+\.\d+)(?:\b|-)")
UI_ROUTE_PREFIX = "ds-pipeline-ui-"  # the DSPA's KFP UI Route, when its mlpipelineUI is deployed


def task_pods(run_id: str, namespace: str = "") -> tuple[list, str]:
    """(the run's task pods (postmortem.TaskPod), why they could not be read or "")."""
    from . import kube, postmortem

    try:
        return postmortem.task_pods(run_id, namespace or kube.current_namespace()), ""
    except Exception as exc:  # noqa: BLE001 - the report is best effort
        return [], f"the run's task pods could not be read ({type(exc).__name__}: {first_line(exc)[:200]})"


def task_timeline(run_id: str, namespace: str = ""):
    """(phases, started_at, why not): the run's tasks at their real start and end times, from
    the run's task pods (label pipeline/runid); this task's own pod runs until now."""
    from . import postmortem

    pods, why = task_pods(run_id, namespace)
    if why:
        return [], None, why
    phases = postmortem.timeline(pods, now=datetime.now(UTC))
    if not phases:
        return [], None, f"no task pod of run {run_id} was found (label pipeline/runid)"
    return phases, postmortem.started(pods), ""


def kfp_run_url(run_id: str, namespace: str = "") -> str:
    """The run's page in the KFP UI of the project's DSPA (its Route ds-pipeline-ui-<dspa>,
    which pipeline-runner may list), else ""."""
    from . import kube

    try:
        ns = namespace or kube.current_namespace()
        routes = kube.call(kube.custom().list_namespaced_custom_object, "route.openshift.io", "v1", ns, "routes",
                           what="list the namespace's Routes", attempts=1)
    except Exception:  # noqa: BLE001 - no Routes (not OpenShift), no access: no link
        return ""
    return ui_url(routes.get("items") or [], run_id)


def ui_url(routes: list[dict], run_id: str) -> str:
    for route in sorted(routes, key=lambda r: r.get("metadata", {}).get("name", "")):
        host = (route.get("spec") or {}).get("host", "")
        if route.get("metadata", {}).get("name", "").startswith(UI_ROUTE_PREFIX) and host:
            return f"https://{host}/#/runs/details/{run_id}"
    return ""


def ray_version(results: dict | None, image: str) -> str:
    """The Ray version: the one the job recorded in results.json (`ray_version`), else the one
    the image's tag names, else ""."""
    if results and results.get("ray_version"):
        return str(results["ray_version"])
    m = _RAY_TAG.search(image or "")
    return f"{m.group(1)} (from the image tag)" if m else ""
