"""The sandbox's Kubernetes API server: HTTP on loopback, REST semantics of kube-apiserver.

The real `kubernetes` client, its DynamicClient and the CodeFlare SDK talk to it
unmodified. Admission plugins (webhooks) and pod logs are provided by the simulators.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import yaml

from . import errors, patch, schema
from .errors import ApiError
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


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """Clients that drop connections (or resets we inject) are not server errors."""


class ApiServer:
    def __init__(self, store: Store, registry: Registry, auth: Authenticator, faults, audit_path=None,
                 host: str = "127.0.0.1", port: int = 0):
        self.store, self.registry, self.auth, self.faults = store, registry, auth, faults
        self.audit = AuditLog(audit_path)
        self.admission: list[Admission] = []
        self.log_provider: Callable[[str, str, dict], str] | None = None
        self.control: Callable[[str, str, dict, Identity], tuple[int, object]] | None = None
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = _HTTPServer((host, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="apiserver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.audit.close()

    # --- object operations shared by HTTP verbs --------------------------------
    def admit(self, op: str, rt: ResourceType, obj: dict, old: dict | None) -> None:
        for plugin in self.admission:
            plugin(op, rt, obj, old)

    def check_object(self, rt: ResourceType, obj: dict, name: str, query: dict) -> list[str]:
        """Validate names and schema; returns warnings (unknown fields pruned when not strict)."""
        meta = obj.get("metadata") or {}
        causes = []
        pattern = DNS1123_LABEL if rt.plural in LABEL_NAMED else DNS1123_SUBDOMAIN
        limit = 63 if rt.plural in LABEL_NAMED else 253
        what = "RFC 1123 label" if rt.plural in LABEL_NAMED else "RFC 1123 subdomain"
        if name and (not pattern.match(name) or len(name) > limit):
            causes.append(("metadata.name", f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
                           "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                           f"character (at most {limit} characters)"))
        for key in ("labels", "annotations"):
            for k, v in (meta.get(key) or {}).items():
                if not isinstance(v, str):
                    causes.append((f"metadata.{key}", f'Invalid value: "{k}": values must be strings'))
                elif key == "labels" and len(v) > 63:
                    causes.append(("metadata.labels", f'Invalid value: "{v}": must be no more than 63 characters'))
        warnings = []
        if rt.schema is not None:
            mode = (query.get("fieldValidation") or ["Strict"])[0]
            errs, unknown = schema.validate(obj, rt.schema, strict=(mode == "Strict"))
            causes += errs
            if unknown and mode != "Strict":
                schema.prune(obj, unknown)
                if mode == "Warn":
                    warnings = [f'unknown field "{p}"' for p in unknown]
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


class _Handler(BaseHTTPRequestHandler):
    api: ApiServer
    protocol_version = "HTTP/1.1"
    server_version = "sandbox-apiserver"

    def log_message(self, format, *args):  # noqa: A002 - silence the default stderr log
        pass

    # --- plumbing --------------------------------------------------------------
    def _send(self, code: int, body, content_type: str = "application/json", headers: dict | None = None):
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code, errors.HTTP_REASONS.get(code))
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", self._audit_id)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self._code = code

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        try:
            if ctype == "application/apply-patch+yaml":
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(f"the body of the request could not be decoded: {exc}") from None

    def _reset(self):
        """Abort the connection with a TCP RST, like a dropped load balancer."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()
        self._code = 0

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _dispatch(self, method: str):
        started = time.monotonic()
        self._audit_id = f"{time.time_ns():x}"
        self._code = 0
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        identity = self.api.auth.identify(self.headers.get("Authorization"))
        self._verb = method.lower()
        try:
            if self.api.faults.take_reset(path):
                self._reset()
                return
            delay = self.api.faults.latency(path)
            if delay:
                time.sleep(delay)
            injected = self.api.faults.take_error(path)
            if injected:
                code = int(injected.get("code", 503))
                raise (errors.too_many_requests() if code == 429 else
                       errors.unavailable() if code == 503 else errors.internal())
            if identity is None:
                raise errors.unauthorized()
            if path.startswith("/sandbox/"):
                if identity is not self.api.auth.admin:
                    raise errors.forbidden(identity.user, self._verb, None, "sandbox", None, None)
                code, body = self.api.control(method, path, {"query": query, "body": self._body()}, identity)
                self._send(code, body)
                return
            self._route(method, path, query, identity)
        except ApiError as exc:
            self._send(exc.code, exc.status(), headers=exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the sandbox: answer like the apiserver would
            self._send(500, errors.internal(f"{type(exc).__name__}: {exc}").status())
        finally:
            self.api.audit.write({
                "ts": round(time.time(), 3), "user": identity.user if identity else "system:anonymous",
                "verb": self._verb, "method": method, "path": path, "query": url.query,
                "code": self._code, "ms": round((time.monotonic() - started) * 1000, 1)})

    # --- routing ---------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict, who: Identity) -> str:
        reg = self.api.registry
        p = path.rstrip("/") or "/"
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

        verb = {"GET": "get" if name else "list", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
        if method == "GET" and not name and (query.get("watch") or [""])[0] in ("1", "t", "T", "true", "TRUE", "True"):
            verb = "watch"
        if method == "POST" and name:
            raise errors.method_not_allowed()
        if method in ("PUT", "PATCH") and not name:
            raise errors.method_not_allowed()
        resource = f"{plural}/{sub}" if sub else plural
        self._verb = verb
        if not who.can(group, resource, verb, namespace):
            raise errors.forbidden(who.user, verb, rt, resource, name, namespace)
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

    def _get(self, rt, namespace, name, sub, query, who):
        if sub == "log":
            self.api.store.get(rt, namespace, name)
            text = self.api.log_provider(namespace, name, {k: v[0] for k, v in query.items()}) if self.api.log_provider else ""
            self._send(200, text, "text/plain")
            return
        self._send(200, self.api.store.get(rt, namespace, name))

    def _list(self, rt, namespace, name, sub, query, who):
        items, rv = self.api.store.list(rt, namespace, self._matchers(query))
        limit = int((query.get("limit") or ["0"])[0] or 0)
        meta = {"resourceVersion": rv}
        if limit and len(items) > limit:
            items = items[:limit]
        self._send(200, {**self._list_kind(rt), "metadata": meta, "items": items})

    def _watch(self, rt, namespace, name, sub, query, who):
        match = self._matchers(query)
        timeout = float((query.get("timeoutSeconds") or ["1800"])[0])
        since = (query.get("resourceVersion") or [""])[0]
        self.send_response(200, "OK")
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Audit-Id", self._audit_id)
        self.end_headers()
        self._code = 200

        def emit(type_, obj):
            line = json.dumps({"type": type_, "object": obj}).encode() + b"\n"
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        store = self.api.store
        if since in ("", "0"):
            items, rv = store.list(rt, namespace, match)
            for obj in items:
                emit("ADDED", obj)
            last = int(rv)
        else:
            last = int(since)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                store.wait_for_change(last, min(1.0, max(0.0, deadline - time.monotonic())))
                for ev in store.events_since(last, rt.key, namespace):
                    last = ev.rv
                    if match(ev.obj):
                        emit(ev.type, ev.obj)
                if self.api.httpd.socket.fileno() < 0:
                    break
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _create(self, rt, namespace, name, sub, query, who):
        obj = self._body()
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
        if not meta.get("name") and not meta.get("generateName"):
            raise errors.invalid(rt, "", [("metadata.name", "Required value: name or generateName is required")])
        self.api.require_namespace(rt, namespace)
        warnings = self.api.check_object(rt, obj, meta.get("name") or "", query)
        self.api.admit("CREATE", rt, obj, None)
        _managed(obj, (query.get("fieldManager") or ["python-kubernetes"])[0], "Update", rt.api_version)
        if (query.get("dryRun") or [None])[0] == "All":
            self._send(201, obj)
            return
        created = self.api.store.create(rt, obj)
        self._send(201, created, headers=_warning_headers(warnings))

    def _update(self, rt, namespace, name, sub, query, who):
        obj = self._body()
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        meta = obj.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f'the name of the object ({meta["name"]}) does not match the name on the URL ({name})')
        meta["name"], meta["namespace"] = name, namespace
        if not rt.namespaced:
            meta.pop("namespace", None)
        old = self.api.store.get(rt, namespace, name)
        warnings = self.api.check_object(rt, obj, name, query)
        if sub != "status":
            self.api.admit("UPDATE", rt, obj, old)
        self._send(200, self.api.store.update(rt, obj, subresource=sub), headers=_warning_headers(warnings))

    def _patch(self, rt, namespace, name, sub, query, who):
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        body = self._body()
        store = self.api.store
        with store.lock:
            current = store.find(rt, namespace, name)
            if ctype == "application/apply-patch+yaml":
                manager = (query.get("fieldManager") or [None])[0]
                if not manager:
                    raise errors.bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
                if not isinstance(body, dict):
                    raise errors.bad_request("apply patch must be an object")
                if current is None:
                    # Server-side apply creates what does not exist yet.
                    meta = body.setdefault("metadata", {})
                    meta["name"] = name
                    if rt.namespaced:
                        meta["namespace"] = namespace
                    self.api.require_namespace(rt, namespace)
                    warnings = self.api.check_object(rt, body, name, query)
                    self.api.admit("CREATE", rt, body, None)
                    _managed(body, manager, "Apply", rt.api_version)
                    self._send(201, store.create(rt, body), headers=_warning_headers(warnings))
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
                    if rt.group:
                        raise errors.unsupported_media_type(ctype)
                    new = patch.strategic_merge_patch(current, body)
                else:
                    raise errors.unsupported_media_type(ctype)
                _managed(new, (query.get("fieldManager") or ["python-kubernetes"])[0], "Update", rt.api_version)
            new.setdefault("metadata", {})["name"] = name
            warnings = self.api.check_object(rt, new, name, query)
            if sub != "status":
                self.api.admit("UPDATE", rt, new, current)
            # A patch is applied to the latest version: no resourceVersion precondition
            # unless the patch itself carries one.
            if not (isinstance(body, dict) and (body.get("metadata") or {}).get("resourceVersion")):
                new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            self._send(200, store.update(rt, new, subresource=sub), headers=_warning_headers(warnings))

    def _delete(self, rt, namespace, name, sub, query, who):
        obj = self.api.store.delete(rt, namespace, name)
        if rt.group or rt.plural in ("pods", "services", "namespaces"):
            self._send(200, obj)
        else:
            self._send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                             "details": {"name": name, "kind": rt.plural, "uid": obj["metadata"]["uid"]}})

    def _deletecollection(self, rt, namespace, name, sub, query, who):
        items, _ = self.api.store.list(rt, namespace, self._matchers(query))
        for obj in items:
            try:
                self.api.store.delete(rt, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            except ApiError:
                pass
        self._send(200, {**self._list_kind(rt), "metadata": {}, "items": items})


def _warning_headers(warnings: list[str]) -> dict:
    if not warnings:
        return {}
    return {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)}
