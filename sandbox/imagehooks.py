"""What the sandbox changes in the Ray processes of its Ray image, and why.

Copied into the sandbox's Ray image (rayimage.py) and imported from a .pth there, so it runs in
every Ray process; each change acts only in the process that imports the Ray module it changes,
only when the node's environment asks for it (RayNode sets these for heads), and changes one
setting; everything else is Ray's own. Self-contained (the image has neither kfp_ray nor
kfp_ray_sandbox on its path).

Ray client server ports (PORTS_ENV, "<low>-<high>"). A Ray head's client proxy (ray 2.52.1,
ray/util/client/server/proxier.py) starts one "specific server" process per Ray client, on the
first port of 23000-23999 that a bind test finds free, listening on 127.0.0.1, and dials it
there. In a pod, 127.0.0.1 and those ports are the head's alone. Here every head shares the
machine's 127.0.0.1, and gRPC listens with SO_REUSEPORT: two heads whose clients connect within
the seconds a specific server takes to start both pick 23000, both servers bind it, and the
kernel hands each proxy's connections to either server, so a client could be served by another
cluster's server or fail to start ("Initialization failure from server"). So each head's proxy
draws from a block the sandbox holds machine-wide for the head's lifetime.

Python daemons (ZYGOTE_ENV): a head's `ray start` forks its dashboard, Ray client server, log
monitor and autoscaler monitor from one zygote that imported them once, and the dashboard's forkserver
(below) is a fork of the dashboard taken before it runs (rayzygote.py says how each stays Ray's
own child).

Dashboard modules (MODULES_ENV, e.g. "JobHead,NodeHead,ReportHead"). Ray 2.52's dashboard
runs nine subprocess modules (ray/dashboard/head.py), each a process importing most of Ray;
they were about 40% of the test suite's CPU on this 2-core machine, where every Ray head of
every test is a process. A sandbox head runs those the platform uses: JobHead (the Job API and
package uploads: kfp-ray, `ray job submit`, KubeRay's submitter, the CodeFlare SDK), NodeHead
(it records the head's node id, without which JobHead answers "No available agent") and
ReportHead (/api/gcs_healthz, KubeRay's head readiness probe). A request for another module's
endpoint (State, Event, Metrics, Train, Data, Serve) gets 404 here where a RHOAI head answers:
stricter, never kinder (README, "Where the sandbox still differs").

Dashboard agent modules (NODE_ENV: every sandbox node). A node's dashboard agent finds its
modules by importing every package under ray/dashboard/modules (ray 2.52.1, dashboard/utils.py
get_all_modules), the head's Serve, Train, Data, State and Metrics modules included, to keep
the seven subclasses of DashboardAgentModule: 0.3 CPU-s of imports in every node's start. Here
it imports the files of those seven (AGENT_MODULES) and keeps the subclasses as Ray does: the
same modules, in the same order (a test compares them with Ray's own walk).

GCS subscribers (NODE_ENV: every sandbox node). The dashboard's GCS subscribers (ray 2.52.1,
ray/_private/gcs_pubsub.py `_AioSubscriber._poll`) return an empty batch at once when the GCS
is unavailable, and NodeHead's three loops over them (node_head.py: node updates, resource
usage, actors) poll again at once: a busy loop from the GCS's death until the dashboard's, which
`ray start`'s SIGTERM handler kills seconds later (node.py kill_all_processes: raylet, GCS, then
the rest, a second each). It cost about 1.6 CPU-s in every head's deletion, as it does on a
cluster, where nobody pays for it with the other pods' CPU. Here an empty batch from a poll
that had no timeout (only an unavailable GCS returns one) comes after a pause of
UNAVAILABLE_PAUSE_S: what the dashboard sees is the same, minus the loop.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

PORTS_ENV = "KFP_RAY_SANDBOX_CLIENT_SERVER_PORTS"
MODULES_ENV = "KFP_RAY_SANDBOX_DASHBOARD_MODULES"
NODE_ENV = "KFP_RAY_SANDBOX_NODE"  # raynode.NODE_ENV: the node's temp dir
ZYGOTE_ENV = "KFP_RAY_SANDBOX_ZYGOTE"  # "1": a head's `ray start` forks its Python daemons (rayzygote.py)
# the files that define Ray 2.52.1's dashboard agent modules, in the order Ray's walk imports them
AGENT_MODULES = ("aggregator.aggregator_agent", "event.event_agent", "job.job_agent", "log.log_agent",
                 "reporter.healthz_agent", "reporter.reporter_agent")
UNAVAILABLE_PAUSE_S = 0.5  # a GCS subscriber's poll that found the GCS unavailable returns after this


def install() -> None:
    """Register the changes this process's environment asks for, to run when (if ever) it
    imports the Ray module concerned."""
    block = os.environ.get(PORTS_ENV)
    if block:
        low, high = (int(x) for x in block.split("-"))
        _after_import("ray.util.client.server.proxier", lambda m: _client_server_ports(m, low, high))
    modules = os.environ.get(MODULES_ENV)
    if modules:
        _after_import("ray.dashboard.head", lambda m: _dashboard_modules(m, set(modules.split(","))))
    if os.environ.get(ZYGOTE_ENV) == "1":
        _after_import("ray._private.services", _daemons_from_zygote)
    if os.environ.get(NODE_ENV):
        _after_import("ray._private.gcs_pubsub", _pause_when_unavailable)
        _after_import("ray.dashboard.utils", _agent_modules_by_name)


def _daemons_from_zygote(services) -> None:
    """In a head's `ray start` only (its command line: `... start ... --head`)."""
    if sys.argv[1:2] != ["start"] or "--head" not in sys.argv:
        return
    try:
        import kfp_ray_sandbox_rayzygote as rayzygote  # beside this module in the image
    except ImportError:
        return
    rayzygote.install(services)


def _client_server_ports(proxier, low: int, high: int) -> None:
    # read by ProxyManager.__init__, after the import
    proxier.MIN_SPECIFIC_SERVER_PORT, proxier.MAX_SPECIFIC_SERVER_PORT = low, high + 1


def _agent_modules_by_name(utils) -> None:
    original = getattr(utils, "get_all_modules", None)
    if original is None or not hasattr(utils, "DashboardAgentModule"):
        return  # a Ray whose dashboard differs from 2.52's: leave it as it is

    def get_all_modules(module_type):
        if module_type is not utils.DashboardAgentModule:
            return original(module_type)
        import importlib

        for name in AGENT_MODULES:
            importlib.import_module(f"ray.dashboard.modules.{name}")
        # then Ray's own filter of get_all_modules, as it stands in 2.52.1 (the test compares the result with Ray's)
        minimal = utils.get_dashboard_dependency_error() is not None
        return [m for m in module_type.__subclasses__() if getattr(m, "__ray_dashboard_module_enable__", True)
                and not (minimal and not m.is_minimal_module())]

    utils.get_all_modules = get_all_modules


def _pause_when_unavailable(gcs_pubsub) -> None:
    cls = getattr(gcs_pubsub, "_AioSubscriber", None)
    original = getattr(cls, "_poll", None)
    if original is None:
        return  # a Ray whose subscribers differ from 2.52's: leave them as they are
    import asyncio

    async def _poll(self, timeout=None):
        await original(self, timeout=timeout)
        if timeout is None and not self._queue and not self._close.is_set():
            await asyncio.sleep(UNAVAILABLE_PAUSE_S)

    cls._poll = _poll


def _dashboard_modules(head, names: set[str]) -> None:
    cls = getattr(head, "DashboardHead", None)
    original = getattr(cls, "_load_subprocess_module_handles", None)
    if original is None:
        return  # a Ray whose dashboard differs from 2.52's: leave it as it is

    def load(self, modules_to_load=None):
        handles = original(self, names if modules_to_load is None else modules_to_load)
        _forked_from_one_import(handles)
        return handles

    cls._load_subprocess_module_handles = load


def _forked_from_one_import(handles) -> None:
    """Start the modules from a forkserver that imported them once, not each from a fresh
    interpreter (Ray's spawn): the same processes, modules and pipes, without paying Ray's
    import per module. Ray forbids fork from the dashboard (its C bindings' static state);
    the forkserver is a fresh interpreter that only imports, so each module still starts
    from state no Ray connection has touched. A module still detects the dashboard's death
    (multiprocessing.parent_process() is the dashboard, through its pipe). The forkserver's
    socket lives in the node's temp dir, which goes with the node however it ends (in the
    machine's TMPDIR it would outlive a killed dashboard); with no node dir, Ray's spawn."""
    import multiprocessing
    import tempfile
    from multiprocessing import process

    node_dir = os.environ.get(NODE_ENV)
    if not handles or not node_dir or not os.path.isdir(node_dir):
        return
    process.current_process()._config["tempdir"] = tempfile.mkdtemp(prefix="pymp-", dir=node_dir)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["ray.dashboard.subprocesses.module",
                                *sorted({h.module_cls.__module__ for h in handles})])
    for h in handles:
        h.mp_context = ctx


def _after_import(target: str, change) -> None:
    if not any(isinstance(f, _PostImport) and f.target == target for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImport(target, change))


class _PostImport(importlib.abc.MetaPathFinder):
    def __init__(self, target: str, change):
        self.target, self.change = target, change

    def find_spec(self, name, path=None, target=None):
        if name != self.target:
            return None
        sys.meta_path.remove(self)  # once: find the real module, then change it once it has run
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return None
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            self.change(module)

        spec.loader.exec_module = exec_module
        return spec
