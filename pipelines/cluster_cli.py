"""`kfp-ray cluster up|status|details|list|down`: a Kueue-queued RayCluster from the terminal,
as the CodeFlare guided demo 0 makes one from a notebook, through the same runtime library
as the provision component (same checks, same waits, same progress lines).

  cluster up NAME [--num-workers N] [--worker-cpu C] ...   create it and wait until ready
  cluster status NAME      its state; while queued, Kueue's reason and the queue's usage
  cluster details NAME     state, dashboard, pods, resources, image, queue, lease
  cluster list             the namespace's RayClusters, kfp-ray's marked with run, age, lease
  cluster down NAME        delete it and wait until it is gone (its quota released); only
                           kfp-ray's (--force: any but a RayJob's, which goes with its RayJob)

Runs as the current kubeconfig's user (`oc login`), in --namespace or the context's. A cluster
made here carries a lease like a pipeline's (--lease-hours, default 8): the lease sweeper
(`kfp-ray gc`, the kfp_ray_gc pipeline) deletes it once that has passed, so a forgotten one
does not hold the queue's quota for ever."""

from __future__ import annotations

import argparse
import sys

DEFAULT_LEASE_HOURS = 8.0
RUN_ID = "terminal"  # the run label of clusters made from the terminal


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="a Ray cluster from the terminal: up, status, details, list, down",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True)
    up = verbs.add_parser("up", help="create a Kueue-queued RayCluster and wait until it is ready",
                          description="Create a Kueue-queued RayCluster through the provision component's library "
                                      "and wait until it is ready, saying what it waits for. Ctrl-C deletes it.")
    up.add_argument("name", help="the RayCluster's name (a DNS label)")
    up.add_argument("--local-queue", default="", help="the LocalQueue (default: the namespace's default queue)")
    up.add_argument("--num-workers", type=int, default=1, help="worker pods (default 1; 0: a head alone)")
    for part, cpu, memory in (("head", "1", "4Gi"), ("worker", "1", "4Gi")):
        up.add_argument(f"--{part}-cpu", default=cpu, help=f"CPU request per {part} pod (default {cpu})")
        up.add_argument(f"--{part}-memory", default=memory, help=f"memory request per {part} pod (default {memory})")
    up.add_argument("--worker-gpus", type=int, default=0, help="nvidia.com/gpu per worker (default 0)")
    up.add_argument("--image", default="", help="the Ray image (default: the RHOAI Ray image of this release)")
    up.add_argument("--data-connection", default="", help="a data connection secret for the Ray pods' env")
    up.add_argument("--lease-hours", type=float, default=DEFAULT_LEASE_HOURS,
                    help=f"after this the sweeper may delete it (default {DEFAULT_LEASE_HOURS:g})")
    up.add_argument("--admission-timeout", type=float, default=600, help="seconds to wait in the queue (default 600)")
    up.add_argument("--startup-timeout", type=float, default=900, help="seconds for its pods to start (default 900)")
    up.set_defaults(fn=cmd_up)
    for verb, fn, helptext in (("status", cmd_status, "its state, and Kueue's reason while it is queued"),
                               ("details", cmd_details, "state, dashboard, pods, resources, image, queue, lease"),
                               ("down", cmd_down, "delete it and wait until it is gone")):
        v = verbs.add_parser(verb, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        v.add_argument("name", help="the RayCluster's name")
        v.set_defaults(fn=fn)
        if verb == "down":
            v.add_argument("--force", action="store_true",
                           help="delete it even if kfp-ray did not make it (never a RayJob's cluster)")
    ls = verbs.add_parser("list", help="the namespace's RayClusters",
                          description="The namespace's RayClusters: state, age and resources; kfp-ray's also "
                                      "with their run and lease.")
    ls.set_defaults(fn=cmd_list)
    for v in verbs.choices.values():
        v.add_argument("--namespace", "-n", default="", help="the namespace (default: the kubeconfig context's)")


def _ns(args) -> str:
    from kfp_ray import kube

    return args.namespace or kube.current_namespace()


def _fail(exc: Exception) -> int:
    from kfp_ray.lease import one_line

    print(f"error: {one_line(exc)}", file=sys.stderr)
    return 1


def cmd_up(args) -> int:
    import os
    import signal

    from kfp_ray import tasks
    from kfp_ray.errors import Cancelled, KfpRayError

    lease = args.lease_hours * 3600
    # Ctrl-C takes the SIGTERM path: provisioning deletes what it created, as a cancelled task does
    signal.signal(signal.SIGINT, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
    try:
        p = tasks.provision(RUN_ID, cluster_name=args.name, namespace=args.namespace, local_queue=args.local_queue,
                            num_workers=args.num_workers, head_cpu=args.head_cpu, head_memory=args.head_memory,
                            worker_cpu=args.worker_cpu, worker_memory=args.worker_memory, worker_gpus=args.worker_gpus,
                            image=args.image, data_connection=args.data_connection,
                            admission_timeout=args.admission_timeout, startup_timeout=args.startup_timeout,
                            lease_seconds=lease, renew_every_seconds=min(lease / 2, 3600), task_name="cluster-up")
    except KfpRayError as exc:
        return _fail(exc)
    except Cancelled:
        print(f"interrupted: RayCluster {args.name} deleted", file=sys.stderr)
        return 130
    print(f"RayCluster {p.name} is ready in {p.namespace}: dashboard {p.dashboard_url}")
    print(f"lease {args.lease_hours:g}h; `kfp-ray cluster down {p.name}` when done")
    return 0


def _existing(args) -> tuple[dict | None, int]:
    """(the RayCluster, 0), or (None, exit code) once said why there is none."""
    from kfp_ray import rayclusters

    try:
        rc = rayclusters.get(args.name, _ns(args))
    except Exception as exc:  # noqa: BLE001
        return None, _fail(exc)
    if rc is None:
        print(f"no RayCluster {args.name} in {_ns(args)}")
        return None, 1
    return rc, 0


def state_of(rc: dict) -> str:
    """queued (suspended: Kueue has not admitted it), being deleted, or KubeRay's state."""
    from kfp_ray import rayclusters

    if rayclusters.being_deleted(rc):
        return "being deleted"
    if rayclusters.suspended(rc):
        return "queued"
    return (rc.get("status") or {}).get("state") or "starting"


def cmd_status(args) -> int:
    from kfp_ray.queues import KueueView

    rc, code = _existing(args)
    if rc is None:
        return code
    state = state_of(rc)
    print(f"{args.name}: {state}")
    if state == "queued":
        reason = KueueView().waiting_reason(rc)
        print(f"  {reason or 'Kueue has not admitted it yet (its reasons are not readable here)'}")
    return 0


def cmd_details(args) -> int:
    from kfp_ray import kube, lease

    rc, code = _existing(args)
    if rc is None:
        return code
    meta, spec = rc["metadata"], rc.get("spec") or {}
    labels = meta.get("labels") or {}
    head = (spec.get("headGroupSpec") or {}).get("template", {}).get("spec", {}).get("containers", [{}])[0]
    lines = [f"RayCluster {meta['name']} in {meta['namespace']}: {state_of(rc)}",
             f"  queue:      {labels.get('kueue.x-k8s.io/queue-name', '-')}",
             f"  resources:  {lease.held(rc).describe()}",
             f"  image:      {head.get('image', '-')}",
             f"  dashboard:  {_dashboard(rc) or '-'}",
             f"  lease:      {lease.describe_lease(lease.lease_of(rc))}" + ("" if lease.managed(rc) else " (not kfp-ray's)")]
    try:
        pods = kube.core().list_namespaced_pod(meta["namespace"], label_selector=f"ray.io/cluster={meta['name']}",
                                               _request_timeout=30).items
    except Exception:  # noqa: BLE001 - details are best effort
        pods = []
    lines.append(f"  pods:       {len(pods)}")
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        ready = sum(1 for c in pod.status.container_statuses or [] if c.ready)
        lines.append(f"    {pod.metadata.name}  {pod.status.phase}  {ready}/{len(pod.spec.containers)} ready")
    print("\n".join(lines))
    return 0


def _dashboard(rc: dict) -> str:
    """The dashboard's address as the CodeFlare SDK's cluster_dashboard_uri finds it: RHOAI 3.x
    publishes it as KubeRay's HTTPRoute on the data-science-gateway, 2.x as the CodeFlare
    operator's Route `ray-dashboard-<name>`. Empty when neither is readable (yet)."""
    return _gateway_dashboard(rc) or _route_dashboard(rc)


GATEWAY_GROUP = ("gateway.networking.k8s.io", "v1")
PLATFORM_NAMESPACES = ("redhat-ods-applications", "opendatahub")  # where KubeRay puts the HTTPRoutes (3.x)


def _gateway_dashboard(rc: dict) -> str:
    """`https://<the Gateway listener's hostname>/ray/<ns>/<name>` from the cluster's HTTPRoute
    (red-hat-data-services/kuberay rhoai-3.3 authentication_controller.go ensureHttpRoute)."""
    from kfp_ray import kube

    ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
    selector = f"ray.io/cluster-name={name},ray.io/cluster-namespace={ns}"
    for where in PLATFORM_NAMESPACES:
        try:
            routes = kube.custom().list_namespaced_custom_object(*GATEWAY_GROUP, where, "httproutes", label_selector=selector,
                                                                 _request_timeout=30)["items"]
        except Exception:  # noqa: BLE001 - no Gateway API (2.x), or not readable by this user
            continue
        for route in routes:
            parent = ((route.get("spec") or {}).get("parentRefs") or [{}])[0]
            try:
                gateway = kube.custom().get_namespaced_custom_object(
                    *GATEWAY_GROUP, parent.get("namespace", where), "gateways", parent.get("name", ""), _request_timeout=30)
            except Exception:  # noqa: BLE001
                continue
            host = next((li.get("hostname") for li in (gateway.get("spec") or {}).get("listeners") or []
                         if li.get("hostname")), "")
            if host:
                return f"https://{host}/ray/{ns}/{name}"
    return ""


def _route_dashboard(rc: dict) -> str:
    from kfp_ray import kube

    try:
        route = kube.custom().get_namespaced_custom_object("route.openshift.io", "v1", rc["metadata"]["namespace"],
                                                           "routes", f"ray-dashboard-{rc['metadata']['name']}",
                                                           _request_timeout=30)
    except Exception:  # noqa: BLE001 - not made yet, or no Routes here
        return ""
    host = (route.get("spec") or {}).get("host", "")
    return f"{'https' if (route.get('spec') or {}).get('tls') else 'http'}://{host}" if host else ""


def cmd_list(args) -> int:
    from kfp_ray import kube, lease, rayclusters

    ns = _ns(args)
    try:
        items = kube.custom().list_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", _request_timeout=30)["items"]
    except Exception as exc:  # noqa: BLE001
        return _fail(exc)
    if not items:
        print(f"no RayClusters in {ns}")
        return 0
    workloads = _workloads(ns) if any(rc["spec"].get("suspend") for rc in items) else []
    table = [["NAME", "STATE", "QUEUE", "KFP-RAY RUN", "AGE", "LEASE", "RESOURCES"]]
    for rc in sorted(items, key=lambda r: r["metadata"]["name"]):
        ours = lease.managed(rc)
        entry = lease.judge(rc)
        table.append([rc["metadata"]["name"], state_of(rc), queue_column(rc, workloads),
                      entry.run_id if ours else "- (not kfp-ray's)",
                      lease.duration(rayclusters.age_seconds(rc)), lease.describe_lease(entry.lease) if ours else "-",
                      lease.held(rc).describe()])
    print("\n".join(lease.align(table)))
    if workloads is None:
        print("(QUEUE: positions need permission to list Kueue Workloads here: deploy/rbac-kfp-ray.yaml, part 1)")
    return 0


def _workloads(ns: str) -> list[dict] | None:
    """The namespace's Kueue Workloads, or None where they may not be listed."""
    from kfp_ray import kube
    from kfp_ray.queues import KUEUE

    try:
        return kube.custom().list_namespaced_custom_object(*KUEUE, ns, "workloads", _request_timeout=30)["items"]
    except Exception:  # noqa: BLE001 - the column says it cannot tell
        return None


def queue_column(rc: dict, workloads: list[dict] | None) -> str:
    """A waiting cluster's place in its LocalQueue (position 0: next in line, as Kueue counts)."""
    from kfp_ray.queue_position import position

    queue = (rc["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name", "")
    if not rc["spec"].get("suspend") or not queue:
        return queue or "-"
    got = position(workloads or [], rc["metadata"]["uid"], queue) if workloads is not None else None
    return f"{queue}: position {got[0]} of {got[1]}" if got else f"{queue}: waiting"


def cmd_down(args) -> int:
    from kfp_ray import lease, rayclusters

    ns = _ns(args)
    try:
        rc = rayclusters.get(args.name, ns)
        if rc is None:
            print(f"no RayCluster {args.name} in {ns}: nothing to delete")
            return 0
        refused = down_refusal(rc, args.force)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return 1
        held = lease.held(rc).describe()
        # that object only (never a namesake made since), and a lease only on kfp-ray's own
        rayclusters.delete(args.name, ns, rc=rc, lease=lease.managed(rc))
    except Exception as exc:  # noqa: BLE001
        return _fail(exc)
    print(f"deleted RayCluster {args.name} in {ns}; released {held}")
    return 0


def down_refusal(rc: dict, force: bool) -> str:
    """Why `cluster down` leaves this cluster alone ('' when it may delete it): a RayJob's
    cluster goes with its RayJob (KubeRay would make it again, or fail the job), whatever
    --force says; one kfp-ray did not make (a notebook's, another tool's) needs --force."""
    from kfp_ray import lease, rayclusters

    meta = rc["metadata"]
    name, ns = meta["name"], meta["namespace"]
    job = rayclusters.owning_rayjob(rc)
    if job or (meta.get("labels") or {}).get("ray.io/originated-from-crd") == "RayJob":
        return (f"RayCluster {name} belongs to {f'RayJob {job}' if job else 'a RayJob'}: KubeRay deletes it when "
                "the job ends, and deleting it would fail the job. Stop the job by deleting the RayJob instead "
                f"(`oc delete rayjob {job or '<name>'} -n {ns}`)")
    if not lease.managed(rc) and not force:
        return (f"RayCluster {name} is not kfp-ray's (no app.kubernetes.io/managed-by=kfp-ray and run labels): "
                "a notebook's, the CodeFlare SDK's or another tool's. Delete it there, or add --force to delete it "
                "anyway")
    return ""
