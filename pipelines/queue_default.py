"""The project's default LocalQueue, found with the user's own credentials.

Given no `local_queue`, the provision task would use the project's default LocalQueue, but it
runs as the DSPA's pipeline-runner account, which on OpenShift AI may not read Kueue objects: it
can only guess the one named `default`. On a project set up as RHOAI's docs do (one LocalQueue,
annotated kueue.x-k8s.io/default-queue: "true", none named `default`) the run would wait its
whole admission_timeout for a queue that does not exist. The user who starts the run may
usually list the project's LocalQueues (admins and editors can), so `kfp-ray run/submit/
schedule` resolve the default here, as the CodeFlare SDK does (the annotated one, else the one
named `default`), and pass it as the run's `local_queue` parameter."""

from __future__ import annotations

import sys

from kfp_ray.queues import DEFAULT_QUEUE_ANNOTATION as ANNOTATION
from kfp_ray.queues import DEFAULT_QUEUE_NAME as NAMED  # Kueue's LocalQueueDefaulting's, the task's guess
from kfp_ray.queues import annotated_default, default_queue

from .cli_args import UsageError

TIMEOUT = (5.0, 30.0)


class NoDefaultQueue(UsageError):
    """The project has no default LocalQueue: a run without local_queue could never start."""


def with_default_queue(params: dict, inputs, namespace: str | None = None, api_client=None, out=None) -> dict:
    """`params` with local_queue set to the project's default LocalQueue when the pipeline has
    that parameter and the user gave none. `inputs`: the pipeline's parameter names; `api_client`:
    a kubernetes ApiClient (default: the current kubeconfig, as `oc login` leaves it);
    `namespace`: the project (default: the kubeconfig context's). Where the user may not list
    LocalQueues, params are left as they are, with a line saying what the task will use.
    Raises NoDefaultQueue (a usage error) when the project has none."""
    out = out or sys.stdout
    if "local_queue" not in inputs or params.get("local_queue"):
        return params
    try:
        from kubernetes import client, config

        from .connection import kubeconfig_path

        if api_client is None:
            api_client = config.new_client_from_config(config_file=kubeconfig_path())
        if not namespace:
            namespace = config.list_kube_config_contexts(config_file=kubeconfig_path())[1]["context"].get("namespace") \
                or "default"
        queues = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta1", namespace, "localqueues", _request_timeout=TIMEOUT)["items"]
    except Exception as exc:  # noqa: BLE001 - said, and the run goes on as the dashboard would start it
        from .connection import _one_line

        why = "you may not list them" if getattr(exc, "status", 0) == 403 else f"they could not be read: {_one_line(exc)}"
        print(f"==> local_queue not given and the project's LocalQueues unknown ({why}): the provision task uses the "
              f"LocalQueue named {NAMED!r}; if there is none, pass --param local_queue=<name> "
              "(`oc get localqueues`)", file=out, flush=True)
        return params
    name = default_queue(queues)
    if name is None:
        have = ", ".join(sorted(q["metadata"]["name"] for q in queues)) or "none"
        raise NoDefaultQueue(f"local_queue not given and namespace {namespace} has no default LocalQueue (none annotated "
                             f"{ANNOTATION}=true, none named {NAMED!r}); pass --param local_queue=<name> (it has: {have})")
    how = f"annotated {ANNOTATION}=true" if annotated_default(queues, name) else f"named {NAMED!r}"
    print(f"==> local_queue={name}: the default LocalQueue of {namespace} ({how}), passed to the run because its "
          "tasks' service account may not read Kueue", file=out, flush=True)
    return {**params, "local_queue": name}

