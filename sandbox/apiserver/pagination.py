"""LIST with `limit` and `continue`, as kube-apiserver v1.31 pages through etcd.

Matched against k8s.io/apiserver v0.31.9: storage/continue.go (the token: base64url of
{"v":"meta.k8s.io/v1","rv":N,"start":"<key after the prefix>\\x00"}, its decode errors),
storage/etcd3/store.go GetList (every page is read at the first page's revision;
remainingItemCount only without selectors; "specifying resource version is not allowed when
using continue"), storage/etcd3/errors.go (a revision compacted away: 410 Expired, with a
token that continues inconsistently at the latest revision), and storage/cacher's
shouldDelegateList (a paged LIST at resourceVersion "0" is served whole from the watch cache).
"""

from __future__ import annotations

import base64
import json
import posixpath

from . import errors
from .errors import ApiError

_EXPIRED = "The resourceVersion for the provided list is too old."
_INCONSISTENT = ("The provided continue parameter is too old to display a consistent list result. You can start a "
                 "new list without the continue parameter, or use the continue token in this response to retrieve "
                 "the remainder of the results. Continuing with the provided token results in an inconsistent list - "
                 "objects that were created, modified, or deleted between the time the first chunk was returned and "
                 "now may show up in the list.")
_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def key_of(rt, obj: dict, namespace: str | None) -> str:
    """The object's etcd key after the list's prefix (/registry/<resource>/[<namespace>/])."""
    meta = obj["metadata"]
    if rt.namespaced and namespace is None:
        return f"{meta['namespace']}/{meta['name']}"
    return meta["name"]


def encode(start: str, rv: int) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(token: str) -> tuple[str, int]:
    """(start key, revision; -1 for the latest) or 400 "invalid continue token: ..."."""
    def bad(why: str) -> ApiError:
        return errors.bad_request(f"invalid continue token: {why}")

    try:
        wrong = next((i for i, ch in enumerate(token) if ch not in _ALPHABET), None)
        if wrong is not None:
            raise ValueError(f"illegal base64 data at input byte {wrong}")
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"continue key is not valid: {exc}") from None
    if data.get("v") != "meta.k8s.io/v1":
        raise bad(f"continue key is not valid: server does not recognize this encoded version {data.get('v', '')}")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise bad("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise bad("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if posixpath.normpath(key) != key or key.startswith("//"):
        raise bad(f"continue key is not valid: {start}")
    return key[1:], rv


def page(rt, store, namespace, match, query, limit: int, token: str, selectors: bool) -> tuple[list[dict], dict]:
    """One page: (items, list metadata). Reads the store at the token's revision."""
    rv_param = (query.get("resourceVersion") or [""])[0]
    start, at = "", 0
    if token:
        start, at = decode(token)
        if rv_param not in ("", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
    elif rv_param not in ("", "0") and (query.get("resourceVersionMatch") or [""])[0] in ("", "Exact"):
        at = _revision(rv_param)  # the legacy (and Exact) paged LIST reads at that revision
    latest = store.rv
    at = latest if at <= 0 or at > latest else at
    objects = store.list_at(rt, at, namespace)
    if objects is None:
        if token:
            err = ApiError(410, "Expired", _INCONSISTENT)
            err.list_meta = {"continue": encode(start, -1)}
            raise err
        raise ApiError(410, "Expired", _EXPIRED)
    # etcd orders by the whole key ("a-b/x" before "a/x"), not by (namespace, name)
    objects.sort(key=lambda o: key_of(rt, o, namespace))
    rest = [o for o in objects if key_of(rt, o, namespace) >= start and match(o)]
    items = rest[:limit] if limit > 0 else rest
    meta = {"resourceVersion": str(at)}
    if len(rest) > len(items):
        meta["continue"] = encode(key_of(rt, items[-1], namespace) + "\x00", at)
        if not selectors:
            meta["remainingItemCount"] = len(rest) - len(items)
    return items, meta


def _revision(value: str) -> int:
    return parse_revision(value, f'invalid resource version: strconv.ParseUint: parsing "{value}": invalid syntax')


def parse_revision(value: str, refusal: str) -> int:
    """A resourceVersion as the storage layer parses it (a uint64); 400 `refusal` otherwise,
    worded by the caller as the path that refuses it words it."""
    try:
        rv = int(value)
        if rv < 0:
            raise ValueError
        return rv
    except ValueError:
        raise errors.bad_request(refusal) from None
