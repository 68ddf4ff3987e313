"""RHOAI 3.x's `data-science-gateway` (openshift-ingress), as a Ray dashboard's users reach it.

On 3.x KubeRay publishes each RayCluster's dashboard as an HTTPRoute on this Gateway (path
/ray/<ns>/<name>; controllers/kuberay_rhoai.py), and the CodeFlare SDK finds it there:
`https://<listener hostname>/ray/<ns>/<name>`. The sandbox serves that Gateway on loopback over
TLS (its serving CA, like every sandbox endpoint):
- a request needs a bearer token the cluster knows (the gateway's auth proxy); without one it is
  answered 401, which the SDK's is_dashboard_ready counts as up, as on the real gateway;
- the HTTPRoutes attached to the Gateway are matched as Gateway API says: Exact before
  PathPrefix, the longest prefix first; RequestRedirect answers 302; URLRewrite
  ReplacePrefixMatch rewrites the path; the backend Service is reached through its clusterIP
  (the kube-proxy), and only where a ReferenceGrant in its namespace admits HTTPRoutes from the
  route's namespace (else 500, as an unresolved backendRef);
- answers are relayed as they come (requests, streamed), with a 30 s wait for the backend.
Where it differs (docs/sandbox.md): the listener's hostname carries the loopback port, as the
sandbox's Routes do; websockets (the Ray dashboard's log tailing) are not relayed.
"""

from __future__ import annotations

from werkzeug.wrappers import Request, Response

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length", "authorization"}
BACKEND_TIMEOUT = 30.0


class Gateway:
    def __init__(self, store, registry, authenticator, namespace: str, name: str):
        self.store, self.auth = store, authenticator
        self.namespace, self.name = namespace, name
        self.route_t = registry.get("gateway.networking.k8s.io", "httproutes")
        self.grant_t = registry.get("gateway.networking.k8s.io", "referencegrants")
        self.svc_t = registry.get("", "services")

    def __call__(self, environ, start_response):
        request = Request(environ)
        if self.auth.identify(request.headers.get("Authorization")) is None:
            return Response("Unauthorized", status=401, content_type="text/plain")(environ, start_response)
        match = self._match(request.path)
        if match is None:
            return Response("route not found", status=404, content_type="text/plain")(environ, start_response)
        route, rule, prefix = match
        for f in rule.get("filters") or []:
            if f.get("type") == "RequestRedirect":
                r = f["requestRedirect"]
                location = (r.get("path") or {}).get("replaceFullPath") or request.path
                return Response("", status=r.get("statusCode", 302), headers={"Location": location})(environ, start_response)
        path = request.full_path.rstrip("?")
        for f in rule.get("filters") or []:
            if f.get("type") == "URLRewrite" and ((f["urlRewrite"].get("path") or {}).get("type") == "ReplacePrefixMatch"):
                new = f["urlRewrite"]["path"]["replacePrefixMatch"]
                path = new.rstrip("/") + "/" + path[len(prefix):].lstrip("/")
        backend = self._backend(route, rule)
        if backend is None:
            return Response("no healthy upstream", status=500, content_type="text/plain")(environ, start_response)
        return self._relay(request, backend + path)(environ, start_response)

    def _match(self, path: str):
        """(route, rule, matched prefix) of the best match among the routes attached here."""
        best = None
        for route in self.store.list(self.route_t)[0]:
            parents = (route.get("spec") or {}).get("parentRefs") or []
            if not any(p.get("name") == self.name and p.get("namespace", route["metadata"]["namespace"]) == self.namespace
                       for p in parents):
                continue
            for rule in route["spec"].get("rules") or []:
                for m in rule.get("matches") or [{"path": {"type": "PathPrefix", "value": "/"}}]:
                    p = m.get("path") or {}
                    value = p.get("value", "/")
                    if p.get("type") == "Exact" and path == value:
                        rank = (2, len(value))
                    elif p.get("type", "PathPrefix") == "PathPrefix" and (
                            path == value or path.startswith(value.rstrip("/") + "/")):
                        rank = (1, len(value))
                    else:
                        continue
                    if best is None or rank > best[0]:
                        best = (rank, route, rule, value)
        return None if best is None else best[1:]

    def _backend(self, route: dict, rule: dict) -> str | None:
        refs = rule.get("backendRefs") or []
        if not refs:
            return None
        ref = refs[0]
        route_ns = route["metadata"]["namespace"]
        ns = ref.get("namespace", route_ns)
        if ns != route_ns and not self._granted(route_ns, ns):
            return None
        svc = self.store.find(self.svc_t, ns, ref["name"])
        ip = (svc or {}).get("spec", {}).get("clusterIP")
        if not ip or ip == "None":
            return None
        return f"http://{ip}:{ref.get('port', 80)}"

    def _granted(self, from_ns: str, to_ns: str) -> bool:
        for grant in self.store.list(self.grant_t, to_ns)[0]:
            spec = grant.get("spec") or {}
            if any(f.get("kind") == "HTTPRoute" and f.get("namespace") == from_ns for f in spec.get("from") or []) and \
                    any(t.get("kind") == "Service" and t.get("group", "") == "" for t in spec.get("to") or []):
                return True
        return False

    def _relay(self, request: Request, url: str) -> Response:
        import requests

        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        try:
            upstream = requests.request(request.method, url, headers=headers, data=request.get_data(),
                                        stream=True, timeout=BACKEND_TIMEOUT, allow_redirects=False)
        except requests.RequestException as exc:
            return Response(f"upstream connect error: {type(exc).__name__}", status=503, content_type="text/plain")
        out_headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP | {"content-encoding"}]

        def body():
            try:
                yield from upstream.raw.stream(65536, decode_content=True)
            finally:
                upstream.close()
        return Response(body(), status=upstream.status_code, headers=out_headers)
