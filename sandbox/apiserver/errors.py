"""Kubernetes `Status` errors, worded as kube-apiserver words them.

Clients match on the HTTP reason phrase and on `Status.reason`, and people read
`Status.message`, so all three follow the real server.
"""

from __future__ import annotations

HTTP_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class ApiError(Exception):
    """An error the API server answers with a `Status` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.headers = headers or {}

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if getattr(self, "list_meta", None):  # e.g. the inconsistent continue token of a 410
            body["metadata"] = dict(self.list_meta)
        if not self.reason:  # StatusReasonUnknown is "", which Status omits
            del body["reason"]
        if self.details:
            body["details"] = self.details
        return body


def qualified(rt) -> str:
    """`rayclusters.ray.io`, or `pods` for the core group."""
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def not_found(rt, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(rt)} "{name}" not found',
                    {"name": name, "group": rt.group, "kind": rt.plural})


def namespace_not_found(name: str) -> ApiError:
    return ApiError(404, "NotFound", f'namespaces "{name}" not found',
                    {"name": name, "kind": "namespaces"})


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(rt, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{qualified(rt)} "{name}" already exists',
                    {"name": name, "group": rt.group, "kind": rt.plural})


def conflict(rt, name: str) -> ApiError:
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {qualified(rt)} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        {"name": name, "group": rt.group, "kind": rt.plural})


def invalid(rt, name: str, causes: list[tuple[str, str]], reason: str = "FieldValueInvalid",
            kind: str | None = None) -> ApiError:
    """422 with one cause per (field, message), e.g. ("spec.replicas", "Invalid value: ...").
    kind: what the GroupKind names (the Kind, or the plural where the registry store passes the
    resource, as its update path does)."""
    kind = kind or rt.kind
    group_kind = f"{kind}.{rt.group}" if rt.group else kind
    parts = [f"{field}: {msg}" for field, msg in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return ApiError(
        422, "Invalid", f'{group_kind} "{name}" is invalid: {joined}',
        {"name": name, "group": rt.group, "kind": kind,
         "causes": [{"reason": reason, "message": m, "field": f} for f, m in causes]})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(user: str, verb: str, rt, resource: str, name: str | None,
              namespace: str | None) -> ApiError:
    what = qualified(rt) if rt is not None else resource
    subject = f'{what} "{name}"' if name else what
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    group = rt.group if rt is not None else ""
    msg = (f'{subject} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
           f'in API group "{group}" {scope}')
    details = {"group": group, "kind": resource}
    if name:
        details["name"] = name
    return ApiError(403, "Forbidden", msg, details)


def webhook_denied(webhook: str, message: str) -> ApiError:
    return ApiError(403, "Forbidden", f'admission webhook "{webhook}" denied the request: {message}')


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: application/json, application/merge-patch+json, application/json-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {content_type!r})")


def too_many_requests(retry_after: int = 1) -> ApiError:
    return ApiError(429, "TooManyRequests", "the server has received too many requests and has asked us to try again later",
                    {"retryAfterSeconds": retry_after}, headers={"Retry-After": str(retry_after)})


def internal(message: str = "an error on the server has prevented the request from succeeding") -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}")


def request_too_large() -> ApiError:
    """etcd refused the write (its --max-request-bytes, 1.5 MiB by default). kube-apiserver
    passes etcd's error through as a 500 without a reason (kubernetes/kubernetes#112152, open)."""
    return ApiError(500, "", "etcdserver: request is too large")


def entity_too_large(limit: int) -> ApiError:
    """kube-apiserver's own body limit (MaxRequestBodyBytes, 3 MiB), before any decoding."""
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")


def unavailable() -> ApiError:
    return ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request")
