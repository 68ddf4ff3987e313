"""Server-side Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), as kubectl asks.

Columns and cells as kube-apiserver v1.31 prints them: the built-in printers of
kubernetes/pkg/printers/internalversion/printers.go (pods, namespaces, services, secrets,
configmaps, events, serviceaccounts, nodes; priority-1 columns are the `-o wide` ones, always
sent), apiextensions-apiserver's tableconvertor for custom resources (Name, then the CRD
version's additionalPrinterColumns, evaluated as JSONPath; Age when it declares none), the
generic Name / Created At for the rest, and OpenShift's Route printer. Rows carry the object as
PartialObjectMetadata unless `includeObject=Object` (or none for `None`). In a watch, only the
first event's Table has column definitions (the apiserver's watchEmbeddedEncoder).
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime

from .resources import ResourceType, core_definitions

META_GROUP = "meta.k8s.io"
NAME_DOC = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
            "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
            "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")


def _doc(definition: str, field: str) -> str:
    d = core_definitions().get(definition, {})
    return ((d.get("properties") or {}).get(field) or {}).get("description", "")


def _meta_doc(field: str) -> str:
    return _doc("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", field)


def _col(name: str, typ: str = "string", desc: str = "", priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


def _name_col(priority: int = 0) -> dict:
    return _col("Name", "string", NAME_DOC, priority, "name")


def _age_col() -> dict:
    return _col("Age", "string", _meta_doc("creationTimestamp"))


# --- accept negotiation ----------------------------------------------------------------

def negotiate(accept: str | None) -> tuple[str, str] | None:
    """The first Table or PartialObjectMetadata form `accept` asks for: (as, version), or None.

    kubectl get sends `application/json;as=Table;v=v1;g=meta.k8s.io, ...;v=v1beta1..., application/json`.
    """
    for part in (accept or "").split(","):
        fields = [f.strip() for f in part.split(";")]
        if fields[0] not in ("application/json", "*/*"):
            continue
        params = dict(f.split("=", 1) for f in fields[1:] if "=" in f)
        as_ = params.get("as")
        if not as_:
            return None  # plain JSON comes first
        if params.get("g") == META_GROUP and params.get("v") in ("v1", "v1beta1") and as_ in (
                "Table", "PartialObjectMetadata", "PartialObjectMetadataList"):
            return as_, params["v"]
    return None


# --- human durations (k8s.io/apimachinery/pkg/util/duration.HumanDuration) ---------------

def human_duration(seconds: float) -> str:
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return f"{minutes}m" if sec == 0 else f"{minutes}m{sec}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def _parse_time(ts) -> float | None:
    if not ts or not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def since(ts, now: float | None = None) -> str:
    """translateTimestampSince: "<unknown>" for a zero time."""
    t = _parse_time(ts)
    if t is None:
        return "<unknown>"
    return human_duration((now if now is not None else time.time()) - t)


# --- JSONPath (the subset CRD printer columns use) -------------------------------------

_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+|\*)\]|\[\?\(@\.([\w.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]")


def jsonpath(obj, path: str) -> list:
    """Results of a simple JSONPath (`.a.b`, `[0]`, `[*]`, `[?(@.type=='Ready')]`) on `obj`."""
    current = [obj]
    pos = 0
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    while pos < len(path):
        m = _STEP.match(path, pos)
        if not m:
            return []
        pos = m.end()
        key, index, fkey, fval = m.groups()
        nxt = []
        for node in current:
            if key is not None:
                if isinstance(node, dict) and key in node:
                    nxt.append(node[key])
            elif index is not None:
                if isinstance(node, list):
                    nxt.extend(node if index == "*" else node[int(index):int(index) + 1])
            else:
                if isinstance(node, list):
                    for item in node:
                        v = item
                        for k in fkey.split("."):
                            v = v.get(k) if isinstance(v, dict) else None
                        if v is not None and str(v) == fval:
                            nxt.append(item)
        current = nxt
    return current


def _go_print(value) -> str:
    """fmt.Fprint of a decoded JSON value, as client-go's jsonpath prints a string column."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_print(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_print(v) for v in value) + "]"
    return str(value)


def _crd_cell(col: dict, obj: dict, now: float):
    results = jsonpath(obj, col["jsonPath"])
    if not results:
        return None
    value = results[0]
    typ = col.get("type")
    if value is None:
        return None
    if typ == "string":
        return _go_print(value)
    if typ == "integer":
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if typ == "number":
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if typ == "boolean":
        return value if isinstance(value, bool) else None
    if typ == "date":
        return since(value, now) if _parse_time(value) is not None else "<invalid>"
    return None


# --- built-in printers --------------------------------------------------------------

def _pod_columns() -> list[dict]:
    ps, sp = "io.k8s.api.core.v1.PodStatus", "io.k8s.api.core.v1.PodSpec"
    return [_name_col(), _col("Ready", desc="The aggregate readiness state of this pod for accepting traffic."),
            _col("Status", desc="The aggregate status of the containers in this pod."),
            _col("Restarts", desc="The number of times the containers in this pod have been restarted and when the "
                 "last container in this pod has restarted."),
            _age_col(), _col("IP", desc=_doc(ps, "podIP"), priority=1),
            _col("Node", desc=_doc(sp, "nodeName"), priority=1),
            _col("Nominated Node", desc=_doc(ps, "nominatedNodeName"), priority=1),
            _col("Readiness Gates", desc=_doc(sp, "readinessGates"), priority=1)]


def _pod_row(pod: dict, now: float) -> tuple[list, list | None]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    restarts = restartable_restarts = 0
    containers = spec.get("containers") or []
    total = len(containers)
    ready = 0
    last_restart = restartable_last = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    conditions = None
    if phase == "Succeeded":
        conditions = [{"type": "Completed", "status": "True", "reason": "Succeeded",
                       "message": "The pod has completed successfully."}]
    elif phase == "Failed":
        conditions = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    restartable = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total += len(restartable)

    def later(a, b):
        return b if a is None or (b is not None and (_parse_time(b) or 0) > (_parse_time(a) or 0)) else a

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += int(cs.get("restartCount") or 0)
        term_last = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        last_restart = later(last_restart, term_last)
        if cs.get("name") in restartable:
            restartable_restarts += int(cs.get("restartCount") or 0)
            restartable_last = later(restartable_last, term_last)
        state = cs.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if cs.get("name") in restartable and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if term is not None:
            if not term.get("reason"):
                reason = (f"Init:Signal:{term['signal']}" if term.get("signal")
                          else f"Init:ExitCode:{int(term.get('exitCode') or 0)}")
            else:
                reason = "Init:" + term["reason"]
        elif wait is not None and wait.get("reason") and wait["reason"] != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    if not initializing or initialized:
        restarts, last_restart = restartable_restarts, restartable_last
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            last_restart = later(last_restart, ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
            state = cs.get("state") or {}
            term, wait = state.get("terminated"), state.get("waiting")
            if wait is not None and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{int(term.get('exitCode') or 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            ready_cond = any(c.get("type") == "Ready" and c.get("status") == "True"
                             for c in status.get("conditions") or [])
            reason = "Running" if ready_cond else "NotReady"
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    if deleting and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleting and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_str = str(restarts)
    if restarts and last_restart:
        restarts_str = f"{restarts} ({since(last_restart, now)} ago)"
    ips = status.get("podIPs") or []
    pod_ip = (ips[0].get("ip") if ips else "") or "<none>"
    gates = spec.get("readinessGates") or []
    gates_str = "<none>"
    if gates:
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gates_str = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    cells = [pod["metadata"]["name"], f"{ready}/{total}", reason, restarts_str,
             since(pod["metadata"].get("creationTimestamp"), now), pod_ip, spec.get("nodeName") or "<none>",
             status.get("nominatedNodeName") or "<none>", gates_str]
    return cells, conditions


def _service_row(svc: dict, now: float) -> list:
    spec = svc.get("spec") or {}
    typ = spec.get("type") or ""
    ips = spec.get("clusterIPs") or []
    external = spec.get("externalIPs") or []
    if typ in ("ClusterIP", "NodePort"):
        ext = ",".join(external) or "<none>"
    elif typ == "LoadBalancer":
        lb = sorted({i.get("ip") or i.get("hostname") for i in ((svc.get("status") or {}).get("loadBalancer") or {})
                     .get("ingress") or [] if i.get("ip") or i.get("hostname")})
        ext = ",".join(lb + external) or "<pending>"
    elif typ == "ExternalName":
        ext = spec.get("externalName") or ""
    else:
        ext = "<unknown>"
    ports = ",".join(f"{p.get('port')}:{p['nodePort']}/{p.get('protocol', '')}" if p.get("nodePort")
                     else f"{p.get('port')}/{p.get('protocol', '')}" for p in spec.get("ports") or [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [svc["metadata"]["name"], typ, ips[0] if ips else "<none>", ext, ports or "<none>",
            since(svc["metadata"].get("creationTimestamp"), now), selector]


def _event_row(ev: dict, now: float) -> list:
    first = since(ev.get("firstTimestamp"), now) if ev.get("firstTimestamp") else since(ev.get("eventTime"), now)
    last = since(ev.get("lastTimestamp"), now) if ev.get("lastTimestamp") else first
    count = ev.get("count") or 0
    if ev.get("series"):
        last = since(ev["series"].get("lastObservedTime"), now)
        count = ev["series"].get("count") or 0
    elif count == 0:
        count = 1
    inv = ev.get("involvedObject") or {}
    target = f"{(inv.get('kind') or '').lower()}/{inv['name']}" if inv.get("name") else (inv.get("kind") or "").lower()
    src = ev.get("source") or {}
    component = src.get("component") or ev.get("reportingComponent") or ""
    instance = src.get("host") or ev.get("reportingInstance") or ""
    source = f"{component}, {instance}" if instance else component
    return [last, ev.get("type") or "", ev.get("reason") or "", target, inv.get("fieldPath") or "", source,
            (ev.get("message") or "").strip(), first, int(count), ev["metadata"]["name"]]


def _node_row(node: dict, now: float) -> list:
    status = node.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or []}
    states = []
    if "Ready" in conds:
        states.append("Ready" if conds["Ready"].get("status") == "True" else "NotReady")
    if not states:
        states.append("Unknown")
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for k, v in ((node.get("metadata") or {}).get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/") and k[len("node-role.kubernetes.io/"):]:
            roles.add(k[len("node-role.kubernetes.io/"):])
        elif k == "kubernetes.io/role" and v:
            roles.add(v)
    info = status.get("nodeInfo") or {}

    def address(kind):
        return next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == kind), "<none>")

    return [node["metadata"]["name"], ",".join(states), ",".join(sorted(roles)) or "<none>",
            since(node["metadata"].get("creationTimestamp"), now), info.get("kubeletVersion") or "",
            address("InternalIP"), address("ExternalIP"), info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _route_row(route: dict, now: float) -> list:
    """openshift/openshift-apiserver's route printer (NAME HOST/PORT PATH SERVICES PORT TERMINATION WILDCARD)."""
    spec = route.get("spec") or {}
    host = spec.get("host") or ""
    ingress = (route.get("status") or {}).get("ingress")
    admitted = errors = 0
    reason = ""
    for ing in ingress or []:
        cond = next((c for c in ing.get("conditions") or [] if c.get("type") == "Admitted"), None)
        if cond and cond.get("status") == "True":
            admitted += 1
        elif cond and cond.get("status") == "False":
            errors += 1
            reason = cond.get("reason") or ""
    if ingress is not None:
        if admitted == 0 and errors > 0:
            host = reason
        elif errors > 0:
            host = f"{host} ... {errors} rejected"
        elif admitted == 0:
            host = "Pending"
    to = spec.get("to") or {}
    backends = [to] + list(spec.get("alternateBackends") or [])
    total = sum(int(b.get("weight") or 0) for b in backends)
    if len(backends) > 1 and total:
        services = ",".join(f"{b.get('name')}({int(b.get('weight') or 0) * 100 // total}%)" for b in backends)
    else:
        services = to.get("name") or ""
    port = (spec.get("port") or {}).get("targetPort")
    tls = spec.get("tls") or {}
    term = tls.get("termination") or ""
    if tls.get("insecureEdgeTerminationPolicy"):
        term = f"{term}/{tls['insecureEdgeTerminationPolicy']}"
    return [route["metadata"]["name"], host, spec.get("path") or "", services,
            "<all>" if port is None else str(port), term, spec.get("wildcardPolicy") or ""]


def _builtin_printer(rt: ResourceType):
    """(columns, row function) for a built-in type, or None for the generic Name / Created At."""
    core = "io.k8s.api.core.v1."
    age = _age_col
    if rt.group == "" and rt.plural == "pods":
        return _pod_columns(), _pod_row
    if rt.group == "" and rt.plural == "namespaces":
        return ([_name_col(), _col("Status", desc="The status of the namespace"), age()],
                lambda o, now: [o["metadata"]["name"], (o.get("status") or {}).get("phase") or "",
                                since(o["metadata"].get("creationTimestamp"), now)])
    if rt.group == "" and rt.plural == "secrets":
        return ([_name_col(), _col("Type", desc=_doc(core + "Secret", "type")),
                 _col("Data", desc=_doc(core + "Secret", "data")), age()],
                lambda o, now: [o["metadata"]["name"], o.get("type") or "", len(o.get("data") or {}),
                                since(o["metadata"].get("creationTimestamp"), now)])
    if rt.group == "" and rt.plural == "configmaps":
        return ([_name_col(), _col("Data", desc=_doc(core + "ConfigMap", "data")), age()],
                lambda o, now: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                                since(o["metadata"].get("creationTimestamp"), now)])
    if rt.group == "" and rt.plural == "serviceaccounts":
        return ([_name_col(), _col("Secrets", desc=_doc(core + "ServiceAccount", "secrets")), age()],
                lambda o, now: [o["metadata"]["name"], len(o.get("secrets") or []),
                                since(o["metadata"].get("creationTimestamp"), now)])
    if rt.group == "" and rt.plural == "services":
        sp = core + "ServiceSpec"
        return ([_name_col(), _col("Type", desc=_doc(sp, "type")), _col("Cluster-IP", desc=_doc(sp, "clusterIP")),
                 _col("External-IP", desc=_doc(sp, "externalIPs")), _col("Port(s)", desc=_doc(sp, "ports")), age(),
                 _col("Selector", desc=_doc(sp, "selector"), priority=1)], _service_row)
    if rt.group == "" and rt.plural == "events":
        ev = core + "Event"
        return ([_col("Last Seen", desc=_doc(ev, "lastTimestamp")), _col("Type", desc=_doc(ev, "type")),
                 _col("Reason", desc=_doc(ev, "reason")), _col("Object", desc=_doc(ev, "involvedObject")),
                 _col("Subobject", desc=_doc(core + "ObjectReference", "fieldPath"), priority=1),
                 _col("Source", desc=_doc(ev, "source"), priority=1), _col("Message", desc=_doc(ev, "message")),
                 _col("First Seen", desc=_doc(ev, "firstTimestamp"), priority=1),
                 _col("Count", desc=_doc(ev, "count"), priority=1), _name_col(priority=1)], _event_row)
    if rt.group == "" and rt.plural == "nodes":
        ni, ns = core + "NodeSystemInfo", core + "NodeStatus"
        return ([_name_col(), _col("Status", desc="The status of the node"),
                 _col("Roles", desc="The roles of the node"), age(),
                 _col("Version", desc=_doc(ni, "kubeletVersion")),
                 _col("Internal-IP", desc=_doc(ns, "addresses"), priority=1),
                 _col("External-IP", desc=_doc(ns, "addresses"), priority=1),
                 _col("OS-Image", desc=_doc(ni, "osImage"), priority=1),
                 _col("Kernel-Version", desc=_doc(ni, "kernelVersion"), priority=1),
                 _col("Container-Runtime", desc=_doc(ni, "containerRuntimeVersion"), priority=1)], _node_row)
    if rt.group == "route.openshift.io" and rt.plural == "routes":
        return ([_name_col(), _col("Host/Port", desc="Host string"), _col("Path", desc="Path string"),
                 _col("Services", desc="Services string"), _col("Port", desc="Port string"),
                 _col("Termination", desc="Termination string"), _col("Wildcard", desc="Wildcard string")],
                _route_row)
    return None


def columns(rt: ResourceType) -> list[dict]:
    """The Table's column definitions for `rt`."""
    if not rt.builtin:
        cols = [_name_col()]
        for c in rt.columns:
            desc = c.get("description") or f"Custom resource definition column (in JSONPath format): {c['jsonPath']}"
            cols.append({"name": c["name"], "type": c["type"], "format": c.get("format", ""), "description": desc,
                         "priority": int(c.get("priority") or 0)})
        return cols
    printer = _builtin_printer(rt)
    if printer:
        return printer[0]
    return [_name_col(), _col("Created At", "date", _meta_doc("creationTimestamp"))]


def _cells(rt: ResourceType, obj: dict, now: float) -> tuple[list, list | None]:
    if not rt.builtin:
        return [obj["metadata"]["name"]] + [_crd_cell(c, obj, now) for c in rt.columns], None
    printer = _builtin_printer(rt)
    if printer is None:
        ts = _parse_time(obj["metadata"].get("creationTimestamp"))
        created = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts is not None else "0001-01-01T00:00:00Z"
        return [obj["metadata"]["name"], created], None
    if rt.plural == "pods" and rt.group == "":
        return _pod_row(obj, now)
    return printer[1](obj, now), None


def _row_object(rt: ResourceType, obj: dict, include: str, version: str):
    if include == "Object":
        return {"apiVersion": rt.api_version, "kind": rt.kind, **obj}
    if include == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{META_GROUP}/{version}", "metadata": obj.get("metadata", {})}


def valid_include(include: str | None) -> bool:
    return include in (None, "", "Object", "Metadata", "None")


def to_table(rt: ResourceType, objects: list[dict], list_meta: dict | None = None, include_object: str | None = None,
             version: str = "v1", no_headers: bool = False, now: float | None = None) -> dict:
    """A meta.k8s.io Table of `objects` (one row each). `list_meta`: the list's metadata
    (resourceVersion, continue), or for a single object None (its resourceVersion is used)."""
    now = time.time() if now is None else now
    include = include_object or "Metadata"
    rows = []
    for obj in objects:
        cells, conditions = _cells(rt, obj, now)
        row = {"cells": cells, "object": _row_object(rt, obj, include, version)}
        if conditions:
            row["conditions"] = conditions
        rows.append(row)
    if list_meta is None:
        meta = {"resourceVersion": objects[0]["metadata"].get("resourceVersion", "")} if objects else {}
    else:
        meta = {k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue", "remainingItemCount")}
    table = {"kind": "Table", "apiVersion": f"{META_GROUP}/{version}", "metadata": meta}
    if not no_headers:
        table["columnDefinitions"] = columns(rt)
    table["rows"] = rows
    return table


def partial(rt: ResourceType, objects: list[dict], list_meta: dict | None, version: str = "v1") -> dict:
    """PartialObjectMetadata (single object) or PartialObjectMetadataList."""
    items = [{"kind": "PartialObjectMetadata", "apiVersion": f"{META_GROUP}/{version}", "metadata": o.get("metadata", {})}
             for o in objects]
    if list_meta is None:
        return items[0]
    return {"kind": "PartialObjectMetadataList", "apiVersion": f"{META_GROUP}/{version}",
            "metadata": {k: v for k, v in list_meta.items() if k in ("resourceVersion", "continue")}, "items": items}


class WatchTables:
    """Turns watch events' objects into Tables: headers on the first event only."""

    def __init__(self, rt: ResourceType, include_object: str | None, version: str = "v1"):
        self.rt, self.include, self.version = rt, include_object, version
        self.first = True

    def event(self, type_: str, obj: dict) -> dict:
        if type_ in ("BOOKMARK", "ERROR"):
            return {"type": type_, "object": obj}
        table = to_table(self.rt, [obj], None, self.include, self.version, no_headers=not self.first)
        self.first = False
        return {"type": type_, "object": table}

    def line(self, type_: str, obj: dict) -> bytes:
        return json.dumps(self.event(type_, obj)).encode() + b"\n"
