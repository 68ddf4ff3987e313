"""The sandbox's Kubernetes API server: HTTPS on loopback, REST semantics of kube-apiserver.

The real `kubernetes` client, its DynamicClient, the CodeFlare SDK and kubectl talk to it
unmodified. `ApiServer` is a WSGI application served by werkzeug (sandbox/apiserver/http.py);
each request is one `_Call`: its body is read in full first, the answer is built, the
audit line is written, and only then is the answer sent (so a client that reads the audit
log after its call always finds its line). Admission plugins (webhooks) and pod logs are
provided by the simulators.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from urllib.parse import parse_qs

import yaml
from werkzeug.datastructures import EnvironHeaders

from . import (
    defaults,
    errors,
    metrics,
    openapi,
    pagination,
    patch,
    protobuf,
    reviews,
    scc,
    schema,
    streams,
    tables,
    websocket,
    writes,
)
from .errors import ApiError
from .http import HttpServer, reset_connection
from .policy import StoredPolicy
from .rbac import DISCOVERY_PREFIXES, Authenticator, Identity
from .resources import Registry, ResourceType
from .selectors import field_matcher, label_matcher
from .store import Store, now_rfc3339

K8S_VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.6", "gitCommit": "sandbox",
               "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
               "compiler": "gc", "platform": "linux/amd64"}

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAMED = ("namespaces", "services")
_RAYCLUSTER_PATH = re.compile(r"^/apis/ray\.io/v1/namespaces/[^/]+/rayclusters(?:/([^/]+)(?:/status)?)?/?$")

# An admission plugin: (operation, resource type, new object, old object or None) -> None.
# It may mutate the new object or raise ApiError to deny.
Admission = Callable[[str, ResourceType, dict, dict | None], None]


class AuditLog:
    """One JSON line per request: time, identity, verb, path, status. Never a token."""

    def __init__(self, path):
        self._path = path
        self._lock = threading.Lock()
        self._fh = open(path, "a", buffering=1) if path else None

    def write(self, entry: dict) -> None:
        if self._fh:
            with self._lock:
                self._fh.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._fh:
            with self._lock:
                self._fh.close()
                self._fh = None


class ApiServer:
    def __init__(self, store: Store, registry: Registry, auth: Authenticator, faults, audit_path=None,
                 host: str = "127.0.0.1", port: int = 0, tls=None):
        """tls: an ssl.SSLContext to serve HTTPS with (the sandbox always does); None: plain HTTP."""
        self.store, self.registry, self.auth, self.faults = store, registry, auth, faults
        self.audit = AuditLog(audit_path)
        # Defaulting and the built-in admission plugins (ServiceAccount, Priority, ...) come
        # first, as kube-apiserver decodes and defaults before any webhook sees the object.
        self.policy = StoredPolicy(store, registry)  # the RBAC objects applied through the API
        self.defaulter = defaults.Defaulter(store, registry)
        self.admission: list[Admission] = [self.defaulter.admit]
        self.log_provider: Callable[[str, str, dict], str] | None = None
        self.control: Callable[[str, str, dict, Identity], tuple[int, object]] | None = None
        # The kubelet, for pods/exec, portforward and logs -f (sandbox/apiserver/streams.py).
        self.pod_runtime = None
        self.websockets: set = set()  # open exec and port-forward sessions
        self.http = HttpServer(self, host, port, tls)

    @property
    def url(self) -> str:
        return self.http.url

    def start(self) -> None:
        self.http.start()

    def stop(self) -> None:
        self.http.stop()
        for ws in list(self.websockets):  # their commands are killed, their connections closed
            ws.close()
        self.audit.close()

    def __call__(self, environ, start_response):
        """The WSGI entry point: one request, answered only after its audit line is written."""
        call = _Call(self, environ)
        call.dispatch()
        if call.upgrade is not None:  # exec, port-forward: the session runs on this connection
            environ[websocket.SESSIONS] = self.websockets
            call.upgrade(environ)  # ends raising streams.Upgraded: werkzeug writes nothing more
        code, headers, body = call.response
        start_response(f"{code} {_reason(code)}", headers)
        return body

    # --- object operations shared by HTTP verbs --------------------------------
    def admit(self, op: str, rt: ResourceType, obj: dict, old: dict | None) -> None:
        for plugin in self.admission:
            plugin(op, rt, obj, old)

    def check_object(self, rt: ResourceType, obj: dict, name: str, query: dict, duplicates=(),
                     is_patch: bool = False) -> list[str]:
        """Decode against the schema as the apiserver does (sandbox/apiserver/schema.py: unknown
        fields pruned, CRD defaults applied), then validate names; returns the Warning texts.

        fieldValidation: absent or Warn (the apiserver's default since v1.23) warns per unknown or
        duplicate field, Ignore drops them silently, Strict answers 400 "strict decoding error"."""
        warnings, causes = schema.decode_fields(rt, obj, query, duplicates, is_patch)
        meta = obj.get("metadata") or {}
        pattern = DNS1123_LABEL if rt.plural in LABEL_NAMED else DNS1123_SUBDOMAIN
        limit = 63 if rt.plural in LABEL_NAMED else 253
        what = "RFC 1123 label" if rt.plural in LABEL_NAMED else "RFC 1123 subdomain"
        if rt.group == "rbac.authorization.k8s.io":  # ValidateRBACName: path.IsValidPathSegmentName ("system:...")
            bad = [f"may not be '{name}'"] if name in (".", "..") else [f"may not contain '{c}'" for c in "/%" if c in name]
            causes += [("metadata.name", f'Invalid value: "{name}": {m}') for m in bad]
        elif name and (not pattern.match(name) or len(name) > limit):
            causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
                           "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                           f"character (at most {limit} characters)"))
        for key in ("labels", "annotations"):
            for k, v in (meta.get(key) or {}).items():
                if not isinstance(v, str):
                    causes.append((f"metadata.{key}", f'Invalid value: "{k}": values must be strings'))
                elif key == "labels" and len(v) > 63:
                    causes.append(("metadata.labels", f'Invalid value: "{v}": must be no more than 63 characters'))
        if causes:
            raise errors.invalid(rt, name or meta.get("generateName", ""), causes)
        return warnings

    def require_namespace(self, rt: ResourceType, namespace: str | None) -> None:
        if rt.namespaced and namespace is not None:
            ns_type = self.registry.get("", "namespaces")
            if self.store.find(ns_type, None, namespace) is None:
                raise errors.namespace_not_found(namespace)


def _managed(obj: dict, manager: str, operation: str, api_version: str) -> None:
    entries = [e for e in obj["metadata"].get("managedFields") or [] if e.get("manager") != manager
               or e.get("operation") != operation]
    entries.append({"manager": manager, "operation": operation, "apiVersion": api_version,
                    "time": now_rfc3339(), "fieldsType": "FieldsV1", "fieldsV1": {}})
    obj["metadata"]["managedFields"] = entries


class _Call:
    """One request. The verb methods below answer through `_send` (or `_watch`'s stream);
    `dispatch` writes the audit line once the answer is ready, before it is sent."""

    def __init__(self, api: ApiServer, environ: dict):
        self.api = api
        self.environ = environ
        self.method = environ["REQUEST_METHOD"]
        self.path = environ.get("PATH_INFO") or "/"
        self.query_string = environ.get("QUERY_STRING", "")
        self.headers = EnvironHeaders(environ)
        # The whole body, always, before anything is answered: no byte of it is ever left
        # on the connection to be read as the next request (one over the body limit is
        # refused, and its connection closed, as every answer closes it: http.py).
        self.raw = _read_body(environ)
        self._audit_id = f"{time.time_ns():x}"
        self._code = 0
        self._verb = self.method.lower()
        self._dups: list[str] = []  # duplicate JSON fields of the body (strict field validation)
        self.response: tuple[int, list, object] | None = None
        self.upgrade: Callable[[dict], None] | None = None  # a streaming session, once authorized

    # --- plumbing --------------------------------------------------------------
    def _send(self, code: int, body, content_type: str = "application/json", headers: dict | None = None):
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        hdrs = [("Content-Type", content_type), ("Content-Length", str(len(data))), ("Audit-Id", self._audit_id)]
        hdrs += list((headers or {}).items())
        self.response = (code, hdrs, [data])
        self._code = code

    def _stream(self, chunks, content_type: str = "application/json"):
        """A streamed answer (werkzeug sends it chunked, as kube-apiserver sends watches)."""
        self.response = (200, [("Content-Type", content_type), ("Audit-Id", self._audit_id)], chunks)
        self._code = 200

    def _body(self):
        raw = self.raw
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        try:
            if ctype == protobuf.CONTENT_TYPE:
                return protobuf.decode(raw)
            if ctype == "application/apply-patch+yaml":
                return yaml.safe_load(raw)
            obj, self._dups = schema.loads(raw)
            return obj
        except protobuf.Unsupported as exc:
            raise errors.ApiError(415, "UnsupportedMediaType", f"the sandbox cannot decode this protobuf body: {exc}") from None
        except protobuf.Malformed as exc:
            raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None

    def dispatch(self):
        started = time.monotonic()
        method, path = self.method, self.path
        query = parse_qs(self.query_string)
        identity = self.api.auth.identify(self.headers.get("Authorization"))
        try:
            if identity is not None and self.headers.get("Impersonate-User"):
                identity = self._impersonate(identity, self.headers["Impersonate-User"])
            cluster = self._raycluster_target()
            if self.api.faults.take_reset(path) or (cluster and self.api.faults.take_cluster_reset(*cluster)):
                self._audit(identity, started)
                reset_connection(self.environ)
            delay = self.api.faults.latency(path) + (self.api.faults.cluster_latency(*cluster) if cluster else 0.0)
            if delay:
                time.sleep(delay)
            injected = self.api.faults.take_error(path) or (cluster and self.api.faults.take_cluster_error(*cluster))
            if injected:
                code = int(injected.get("code", 503))
                raise (errors.too_many_requests() if code == 429 else
                       errors.unavailable() if code == 503 else errors.internal())
            if identity is None:
                raise errors.unauthorized()
            if len(self.raw) > MAX_REQUEST_BODY_BYTES:
                raise errors.entity_too_large(MAX_REQUEST_BODY_BYTES)
            if path.startswith("/sandbox/"):
                if identity is not self.api.auth.admin:
                    raise errors.forbidden(identity.user, self._verb, None, "sandbox", None, None)
                code, body = self.api.control(method, path, {"query": query, "body": self._body()}, identity)
                self._send(code, body)
            else:
                self._route(method, path, query, identity)
        except ApiError as exc:
            self._send(exc.code, exc.status(), headers=exc.headers)
        except ConnectionResetError:
            raise
        except Exception as exc:  # a bug in the sandbox: answer like the apiserver would
            self._send(500, errors.internal(f"{type(exc).__name__}: {exc}").status())
        self._audit(identity, started)
        answer_delay = self.api.faults.cluster_latency(*cluster, answer=True) if cluster else 0.0
        if answer_delay:  # done, and audited; the answer is on its way
            time.sleep(answer_delay)

    def _impersonate(self, who: Identity, user: str) -> Identity:
        """Act as `user` (Impersonate-User), as k8s.io/apiserver v0.31's WithImpersonation
        allows it: the requester needs `impersonate` on the service account (or on users);
        a service account gets its groups, everyone system:authenticated. Impersonate-Group
        and extra headers are not supported."""
        sa = user.split(":")
        if len(sa) == 4 and sa[:2] == ["system", "serviceaccount"]:
            allowed, resource, ns, name = who.can("", "serviceaccounts", "impersonate", sa[2]), "serviceaccounts", sa[2], sa[3]
        else:
            allowed, resource, ns, name = who.can("", "users", "impersonate", None), "users", None, user
        if not allowed:
            raise errors.forbidden(who.user, "impersonate", None, resource, name, ns)
        return self.api.auth.as_user(user)

    def _raycluster_target(self) -> tuple[str, str] | None:
        """(name, verb) when this request is on one RayCluster object (the cluster-scoped API
        faults): get/patch/update/delete of it (status included), or the create of that name."""
        m = _RAYCLUSTER_PATH.match(self.path)
        if not m:
            return None
        name = m.group(1)
        if name:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(self.method)
            return (name, verb) if verb else None
        if self.method != "POST":
            return None
        try:
            name = json.loads(self.raw)["metadata"]["name"]
        except (ValueError, KeyError, TypeError):
            return None
        return (name, "create") if isinstance(name, str) else None

    def _audit(self, identity, started: float) -> None:
        self.api.audit.write({
            "ts": round(time.time(), 3), "user": identity.user if identity else "system:anonymous",
            "verb": self._verb, "method": self.method, "path": self.path, "query": self.query_string,
            "code": self._code, "ms": round((time.monotonic() - started) * 1000, 1)})

    # --- routing ---------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict, who: Identity) -> str:
        reg = self.api.registry
        p = path.rstrip("/") or "/"
        if p.startswith("/apis/") and self.api.faults.missing_group(p.split("/")[2]):
            raise errors.path_not_found()  # a cluster without that component's CRDs
        if method == "GET" and p.startswith("/openapi/"):
            served = openapi.serve(reg, p, query, self.headers.get("Accept") or "")
            if served is None:
                raise errors.path_not_found()
            code, body, ctype, headers = served
            self._send(code, body, ctype, headers)
            return "get"
        if method == "GET":
            doc = None
            if p == "/version":
                doc = K8S_VERSION
            elif p in ("/healthz", "/readyz", "/livez"):
                self._send(200, b"ok", "text/plain")
                return "get"
            elif p == "/api":
                doc = reg.api_versions()
            elif p == "/apis":
                doc = reg.api_group_list()
                doc["groups"] = [g for g in doc["groups"] if not self.api.faults.missing_group(g["name"])]
            elif p == "/api/v1":
                doc = reg.resource_list("", "v1")
            elif re.fullmatch(r"/apis/[^/]+", p):
                doc = reg.api_group(p.split("/")[2])
            elif re.fullmatch(r"/apis/[^/]+/[^/]+", p):
                _, _, g, v = p.split("/")
                doc = reg.resource_list(g, v)
            if doc is not None:
                self._send(200, doc)
                return "get"
            if p.startswith(DISCOVERY_PREFIXES) and p.count("/") <= 3 and not p.startswith(("/api/v1/", "/apis/")):
                raise errors.path_not_found()

        parts = p.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.path_not_found()
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        rt = reg.lookup(group, version, plural)
        if rt is None or len(rest) > 3 or (sub and sub not in rt.subresources):
            raise errors.path_not_found()
        if namespace is not None and not rt.namespaced:
            raise errors.path_not_found()
        if rt.key == ("", "pods") and name and sub in streams.SUBRESOURCES:
            self._connect(method, rt, namespace, name, sub, query, who)
            return self._verb

        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
        if method == "GET" and not name and (query.get("watch") or [""])[0] in ("1", "t", "T", "true", "TRUE", "True"):
            verb = "watch"
        if (method == "POST" and name and sub != "token") or (sub == "token" and method != "POST"):
            raise errors.method_not_allowed()  # serviceaccounts/NAME/token: create only (TokenRequest)
        if method in ("PUT", "PATCH") and not name:
            raise errors.method_not_allowed()
        if verb not in rt.verbs:  # reviews are create-only
            raise errors.method_not_allowed()
        resource = f"{plural}/{sub}" if sub else plural
        self._verb = verb
        allowed, _ = reviews.authorize(who, {"verb": verb, "group": group, "resource": plural, "subresource": sub or "",
                                             "name": name or "", "namespace": namespace or ""}, self.api.policy)
        if not allowed:
            raise errors.forbidden(who.user, verb, rt, resource, name, namespace)
        if rt.group == metrics.GROUP:
            metrics.serve(self, rt, namespace, name, query)
            return verb
        handler = getattr(self, f"_{verb}")
        handler(rt, namespace, name, sub, query, who)
        return verb

    # --- verbs -----------------------------------------------------------------
    def _list_kind(self, rt: ResourceType) -> dict:
        return {"apiVersion": rt.api_version, "kind": f"{rt.kind}List"}

    def _matchers(self, query):
        lm = label_matcher((query.get("labelSelector") or [None])[0])
        fm = field_matcher((query.get("fieldSelector") or [None])[0])
        return lambda o: lm(o["metadata"].get("labels") or {}) and fm(o)

    def _connect(self, method, rt, namespace, name, sub, query, who):
        """pods/exec, attach, portforward (streams.py): authorized, then upgraded."""
        if method not in ("GET", "POST"):
            raise errors.method_not_allowed()
        self._verb = streams.verb(method)
        allowed, _ = reviews.authorize(who, {"verb": self._verb, "group": "", "resource": "pods", "subresource": sub,
                                             "name": name, "namespace": namespace}, self.api.policy)
        if not allowed:
            raise errors.forbidden(who.user, self._verb, rt, f"pods/{sub}", name, namespace)
        pod = self.api.store.get(rt, namespace, name)
        if self.api.pod_runtime is None:
            raise errors.unavailable()
        self.upgrade = streams.prepare(self.api.pod_runtime, sub, pod, query, self.headers)
        self._code = 101

    def _get(self, rt, namespace, name, sub, query, who):
        if sub == "log" and _flag(query, "follow") and self.api.pod_runtime is not None:
            self.api.store.get(rt, namespace, name)
            sock = self.environ.get("werkzeug.socket")
            stopping = self.api.http.stopping
            self._stream(self.api.pod_runtime.follow_log(namespace, name, {k: v[0] for k, v in query.items()},
                                                         lambda: stopping.is_set() or streams.client_left(sock)),
                         "text/plain")
            return
        if sub == "log":
            self.api.store.get(rt, namespace, name)
            text = self.api.log_provider(namespace, name, {k: v[0] for k, v in query.items()}) if self.api.log_provider else ""
            self._send(200, text, "text/plain")
            return
        obj = self.api.store.get(rt, namespace, name)
        self._send(200, self._as_asked(rt, [obj], None, query) or obj)

    def _as_asked(self, rt, objects, list_meta, query):
        """A Table or PartialObjectMetadata(List) when the Accept header asks for one (kubectl get)."""
        form = tables.negotiate(self.headers.get("Accept"))
        if form is None:
            return None
        include = (query.get("includeObject") or [None])[0]
        if not tables.valid_include(include):
            raise errors.bad_request(f'unrecognized includeObject value: "{include}"')
        if form[0] == "Table":
            return tables.to_table(rt, objects, list_meta, include, form[1])
        if form[0] == "PartialObjectMetadataList" and list_meta is None:
            raise errors.ApiError(406, "NotAcceptable", "only PartialObjectMetadata may be returned for a single object")
        if form[0] == "PartialObjectMetadata" and list_meta is not None:
            raise errors.ApiError(406, "NotAcceptable", "you requested PartialObjectMetadata, but the requested object is a list")
        return tables.partial(rt, objects, list_meta, form[1])

    def _list(self, rt, namespace, name, sub, query, who):
        limit = writes.query_int(query, "limit") or 0
        writes.query_int(query, "timeoutSeconds")
        token = (query.get("continue") or [""])[0]
        match = self._matchers(query)
        rv_param = (query.get("resourceVersion") or [""])[0]
        if token or (limit > 0 and rv_param != "0"):  # paged: read from "etcd" at one revision
            selectors = bool((query.get("labelSelector") or [""])[0] or (query.get("fieldSelector") or [""])[0])
            items, meta = pagination.page(rt, self.api.store, namespace, match, query, limit, token, selectors)
        else:  # whole, from the watch cache (a limit with resourceVersion=0 is ignored there)
            items, rv = self.api.store.list(rt, namespace, match)
            meta = {"resourceVersion": rv}
        self._send(200, self._as_asked(rt, items, meta, query) or {**self._list_kind(rt), "metadata": meta, "items": items})

    def _watch(self, rt, namespace, name, sub, query, who):
        """A watch as a v1.31 apiserver (watch cache) serves it: no watch-list (the WatchList
        gate is off, so clients fall back to LIST+WATCH), BOOKMARKs when allowed, and a
        410 Expired ERROR event for a resourceVersion older than the history kept."""
        _check_watch_options(query)
        match = self._matchers(query)
        writes.query_int(query, "limit")
        timeout = float(writes.query_int(query, "timeoutSeconds") or 1800)
        since = (query.get("resourceVersion") or [""])[0]
        bookmarks = _flag(query, "allowWatchBookmarks")
        store, stopping = self.api.store, self.api.http.stopping
        expired = None
        # The starting point is taken now, not when the stream is first read.
        if since in ("", "0"):
            initial, rv = store.list(rt, namespace, match)
            last = int(rv)
        else:
            initial, last = [], _resource_version(since)
            expired = _too_old(store, last)
            if expired is None:
                _wait_fresh(store, last)

        def line(type_, obj):
            return json.dumps({"type": type_, "object": obj}).encode() + b"\n"

        form = tables.negotiate(self.headers.get("Accept"))
        if form is not None and form[0] == "Table":  # kubectl get -w: rows, headers first only
            line = tables.WatchTables(rt, (query.get("includeObject") or [None])[0], form[1]).line

        def bookmark():
            return line("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version,
                                     "metadata": {"resourceVersion": str(last)}})

        def events():
            nonlocal last
            yield b""  # status and headers go out now, as kube-apiserver flushes them at once
            if expired is not None:
                yield line("ERROR", expired.status())
                return
            for obj in initial:
                yield line("ADDED", obj)
            started = time.monotonic()
            deadline = started + timeout
            next_bookmark = _next_bookmark(started, deadline) if bookmarks else None
            while time.monotonic() < deadline and not stopping.is_set():
                wake = min(deadline, next_bookmark or deadline, time.monotonic() + 1.0)
                store.wait_for_change(last, max(0.0, wake - time.monotonic()))
                current = store.rv
                for ev in store.events_since(last, rt.key, namespace):
                    current = max(current, ev.rv)
                    seen = _as_filtered(ev, match)
                    if seen is not None:
                        yield line(*seen)
                # Every change up to `current` was seen (other kinds' too): never spin on them.
                last = max(last, current)
                if next_bookmark is not None and time.monotonic() >= next_bookmark:
                    yield bookmark()
                    next_bookmark = _next_bookmark(time.monotonic(), deadline)

        self._stream(events())

    def _create(self, rt, namespace, name, sub, query, who):
        obj = self._body()
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        if rt.verbs == ("create",):
            self._review(rt, obj, who)
            return
        if sub == "token":
            self._token_request(namespace, name, obj)
            return
        dry = _dry_run(query, "CreateOptions")
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
        if not meta.get("name") and not meta.get("generateName"):
            raise errors.invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
        self.api.require_namespace(rt, namespace)
        warnings = self.api.check_object(rt, obj, meta.get("name") or "", query, self._dups)
        self.api.admit("CREATE", rt, obj, None)
        writes.reset_status_on_create(rt, obj)
        if not dry:
            writes.refuse_resource_version_on_create(obj)
        _managed(obj, (query.get("fieldManager") or ["python-kubernetes"])[0], "Update", rt.api_version)
        requester = scc.REQUESTER.set(who)  # SCC admission judges the requesting user too
        try:
            created = self.api.store.create(rt, obj, dry_run=dry)
        finally:
            scc.REQUESTER.reset(requester)
        self._send(201, created, headers=_warning_headers(warnings))

    def _token_request(self, namespace: str, name: str, body: dict):
        """TokenRequest (`oc create token NAME`): a bearer token for an existing ServiceAccount.
        It authenticates as system:serviceaccount:NS:NAME with that account's groups; what it
        may do is what RBAC binds to it. The sandbox's tokens do not expire."""
        self.api.store.get(self.api.registry.get("", "serviceaccounts"), namespace, name)  # 404 if none
        token = self.api.auth.issue(namespace, name)
        spec = {"audiences": [], "expirationSeconds": 3600, **(body.get("spec") or {})}
        self._send(201, {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                         "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None}, "spec": spec,
                         "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}})

    def _review(self, rt, body: dict, who):
        """Self reviews are answered, not stored (SelfSubject{Access,Rules}Review, SelfSubjectReview)."""
        if rt.plural == "selfsubjectaccessreviews":
            answer = reviews.access_review(who, body, self.api.policy)
        elif rt.plural == "selfsubjectrulesreviews":
            answer = reviews.rules_review(who, body, self.api.policy)
        else:
            sa = reviews.service_account_of(who)
            obj = self.api.store.find(self.api.registry.get("", "serviceaccounts"), *sa) if sa else None
            answer = reviews.subject_review(who, obj["metadata"]["uid"] if obj else None)
        self._send(201, answer)

    def _update(self, rt, namespace, name, sub, query, who):
        obj = self._body()
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        dry = _dry_run(query, "UpdateOptions")
        meta = obj.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f'the name of the object ({meta["name"]}) does not match the name on the URL ({name})')
        meta["name"], meta["namespace"] = name, namespace
        if not rt.namespaced:
            meta.pop("namespace", None)
        old = self.api.store.get(rt, namespace, name)
        warnings = self.api.check_object(rt, obj, name, query, self._dups)
        if sub != "status":
            self.api.admit("UPDATE", rt, obj, old)
        writes.require_resource_version(rt, name, obj)
        if sub != "status":
            writes.refuse_stale(rt, name, obj, old)  # the storage's check comes before validation
            writes.refuse_new_finalizers(rt, old, obj)
        self._send(200, self.api.store.update(rt, obj, subresource=sub, dry_run=dry), headers=_warning_headers(warnings))

    def _patch(self, rt, namespace, name, sub, query, who):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        body = self._body()
        store = self.api.store
        dry = _dry_run(query, "PatchOptions")
        with store.lock:
            current = store.find(rt, namespace, name)
            if ctype == "application/apply-patch+yaml":
                manager = (query.get("fieldManager") or [None])[0]
                if not manager:
                    raise errors.bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
                if not isinstance(body, dict):
                    raise errors.bad_request("apply patch must be an object")
                schema.refuse_undeclared(rt, body, name, namespace)
                if current is None:
                    # Server-side apply creates what does not exist yet.
                    meta = body.setdefault("metadata", {})
                    meta["name"] = name
                    if rt.namespaced:
                        meta["namespace"] = namespace
                    self.api.require_namespace(rt, namespace)
                    warnings = self.api.check_object(rt, body, name, query, is_patch=True)
                    self.api.admit("CREATE", rt, body, None)
                    writes.reset_status_on_create(rt, body)
                    _managed(body, manager, "Apply", rt.api_version)
                    self._send(201, store.create(rt, body, dry_run=dry), headers=_warning_headers(warnings))
                    return
                new = patch.apply_patch(current, body)
                _managed(new, manager, "Apply", rt.api_version)
            else:
                if current is None:
                    raise errors.not_found(rt, name)
                if ctype == "application/json-patch+json":
                    new = patch.json_patch(current, body)
                elif ctype == "application/merge-patch+json":
                    if not isinstance(body, dict):
                        raise errors.bad_request("the body of the request was invalid: a merge patch must be a JSON object")
                    new = patch.merge_patch(current, body)
                elif ctype == "application/strategic-merge-patch+json":
                    if not rt.builtin:  # CRDs take no strategic merge patch
                        raise errors.unsupported_media_type(ctype)
                    new = patch.strategic_merge_patch(current, body)
                else:
                    raise errors.unsupported_media_type(ctype)
                _managed(new, (query.get("fieldManager") or ["python-kubernetes"])[0], "Update", rt.api_version)
            new.setdefault("metadata", {})["name"] = name
            warnings = self.api.check_object(rt, new, name, query, self._dups, is_patch=True)
            if sub != "status":
                self.api.admit("UPDATE", rt, new, current)
                if isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion"):
                    writes.refuse_stale(rt, name, new, current)
                writes.refuse_new_finalizers(rt, current, new)
            # A patch is applied to the latest version: no resourceVersion precondition
            # unless the patch itself carries one.
            if not (isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion")):
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self._send(200, store.update(rt, new, subresource=sub, dry_run=dry), headers=_warning_headers(warnings))

    def _delete(self, rt, namespace, name, sub, query, who):
        options = self._delete_options()
        grace, dry = _grace(query, options), _dry_run(query, "DeleteOptions", options)
        policy = writes.propagation_policy(query, options)
        obj = self.api.store.delete(rt, namespace, name, grace_period_seconds=grace,
                                    preconditions=options.get("preconditions") or None, dry_run=dry,
                                    propagation=policy)
        # Still there (finalizers pending): the object; gone: as the type's registry answers.
        if rt.group or rt.plural in ("pods", "services", "namespaces") or obj["metadata"].get("deletionTimestamp"):
            self._send(200, obj)
        else:
            self._send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "details": {"name": name, "kind": rt.plural, "uid": obj["metadata"]["uid"]}})

    def _deletecollection(self, rt, namespace, name, sub, query, who):
        options = self._delete_options()
        dry, grace = _dry_run(query, "DeleteOptions", options), _grace(query, options)
        policy = writes.propagation_policy(query, options)
        items, _ = self.api.store.list(rt, namespace, self._matchers(query))
        for obj in items:
            try:
                self.api.store.delete(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"],
                                      grace_period_seconds=grace, dry_run=dry, propagation=policy)
            except ApiError:
                pass
        self._send(200, {**self._list_kind(rt), "metadata": {}, "items": items})


    def _delete_options(self) -> dict:
        """DeleteOptions may come as the body (client-go, kubectl) as well as the query."""
        try:
            body = self._body()
        except ApiError:
            return {}
        return body if isinstance(body, dict) else {}


def _grace(query: dict, options: dict) -> int | None:
    """gracePeriodSeconds from the query or the DeleteOptions body (the body wins, as in kube)."""
    if "gracePeriodSeconds" in options:
        value = options["gracePeriodSeconds"]
        if value is None or isinstance(value, int) and not isinstance(value, bool):
            return value
        raise errors.bad_request(f"invalid gracePeriodSeconds: {value!r}")
    return writes.query_int(query, "gracePeriodSeconds")


BOOKMARK_EVERY_S = 60.0  # the cacher's bookmarkFrequency
FRESH_WAIT_S = 3.0  # how long the watch cache waits for a resourceVersion it has not seen yet


def _flag(query: dict, key: str) -> bool:
    return (query.get(key) or [""])[0] in ("1", "t", "T", "true", "TRUE", "True")


def _next_bookmark(now: float, deadline: float) -> float | None:
    """cacheWatcher.nextBookmarkTime: every minute, and 2 s before the watch times out."""
    due = min(now + BOOKMARK_EVERY_S, deadline - 2.0)
    return due if due >= now else None


def _as_filtered(ev, match) -> tuple[str, dict] | None:
    """cacheWatcher.convertToWatchEvent (storage/cacher/cache_watcher.go, v1.31): a watcher with
    selectors sees an object that starts matching as ADDED, and one that stops matching (or
    is deleted while matching) as DELETED with its previous content at the event's version."""
    now = ev.type != "DELETED" and match(ev.obj)
    before = ev.prev is not None and match(ev.prev)
    if now:
        return ("MODIFIED" if before else "ADDED"), ev.obj
    if not before:
        return None
    if ev.type == "DELETED":
        return "DELETED", ev.obj
    gone = copy.deepcopy(ev.prev)
    gone["metadata"]["resourceVersion"] = ev.obj["metadata"]["resourceVersion"]
    return "DELETED", gone


def _check_watch_options(query: dict) -> None:
    """validateWatchOptions (apimachinery, v1.31) with the WatchList feature gate off."""
    initial = query.get("sendInitialEvents")
    match = (query.get("resourceVersionMatch") or [""])[0]
    causes = []
    if initial is not None:
        if match != "NotOlderThan":
            causes.append(("resourceVersionMatch", "Forbidden: sendInitialEvents requires setting resourceVersionMatch "
                           "to NotOlderThan", "FieldValueForbidden"))
        causes.append(("sendInitialEvents", "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList "
                       "feature gate is enabled", "FieldValueForbidden"))
    if match:
        if initial is None:
            causes.append(("resourceVersionMatch", "Forbidden: resourceVersionMatch is forbidden for watch unless "
                           "sendInitialEvents is provided", "FieldValueForbidden"))
        if match != "NotOlderThan":
            causes.append(("resourceVersionMatch", f'Unsupported value: "{match}": supported values: "NotOlderThan"',
                           "FieldValueNotSupported"))
    if causes:
        raise _options_invalid("ListOptions", causes)


def _resource_version(value: str) -> int:
    return pagination.parse_revision(value, f'invalid resource version "{value}"')


def _too_old(store: Store, rv: int) -> ApiError | None:
    """The watch cache keeps a window of history; older starting points have expired."""
    with store.lock:
        events = store.events
        if events.maxlen is None or len(events) < events.maxlen or not events:
            return None  # nothing was ever dropped
        oldest = events[0].rv
    if rv < oldest - 1:
        return ApiError(410, "Expired", f"too old resource version: {rv} ({oldest - 1})")
    return None


def _wait_fresh(store: Store, rv: int) -> None:
    """A resourceVersion from the future: wait a little for it, then 504 as the cacher does."""
    current = store.wait_for_change(rv - 1, FRESH_WAIT_S) if rv > store.rv else store.rv
    if rv > current:
        raise ApiError(504, "Timeout", f"Too large resource version: {rv}, current: {current}",
                       {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                        "retryAfterSeconds": 1}, headers={"Retry-After": "1"})


def _options_invalid(kind: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 for request options, as apimachinery words it: ListOptions.meta.k8s.io "" is invalid: ..."""
    parts = [f"{f}: {m}" for f, m, _ in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return ApiError(422, "Invalid", f'{kind}.meta.k8s.io "" is invalid: {joined}',
                    {"group": "meta.k8s.io", "kind": kind,
                     "causes": [{"reason": r, "message": m, "field": f} for f, m, r in causes]})


def _dry_run(query: dict, kind: str, options: dict | None = None) -> bool:
    """dryRun=All (query, or DeleteOptions body): run everything, store nothing. Any other
    value is refused as ValidateDryRun refuses it."""
    values = list(query.get("dryRun") or []) or list((options or {}).get("dryRun") or [])
    bad = [v for v in values if v != "All"]
    if bad:
        shown = ", ".join(f'"{v}"' for v in values)
        raise _options_invalid(kind, [("dryRun", f'Unsupported value: []string{{{shown}}}: supported values: "All"',
                                       "FieldValueNotSupported")])
    return bool(values)


def _warning_headers(warnings: list[str]) -> dict:
    if not warnings:
        return {}
    # RFC 7234 warn-text is a quoted-string: quotes and backslashes escaped (client-go unescapes)
    quoted = (w.replace("\\", "\\\\").replace('"', '\\"') for w in warnings)
    return {"Warning": ", ".join(f'299 - "{w}"' for w in quoted)}


# kube-apiserver's MaxRequestBodyBytes (k8s.io/apiserver pkg/server/config.go, 3 MiB): a body over
# it is refused with 413 before it is decoded (handlers/rest.go limitedReadBody).
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024


def _read_body(environ: dict) -> bytes:
    """The body, or at most one byte more than MAX_REQUEST_BODY_BYTES (then refused)."""
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):  # chunked: werkzeug decodes to the end
        return stream.read(MAX_REQUEST_BODY_BYTES + 1)
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return stream.read(min(length, MAX_REQUEST_BODY_BYTES + 1)) if length > 0 else b""


def _reason(code: int) -> str:
    try:
        return errors.HTTP_REASONS.get(code) or HTTPStatus(code).phrase
    except ValueError:
        return "Unknown"
