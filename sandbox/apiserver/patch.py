"""PATCH semantics: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and the
approximations the sandbox uses for strategic-merge and server-side apply."""

from __future__ import annotations

import copy

from .errors import ApiError, bad_request


def merge_patch(target, patch):
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc, parts):
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node


def json_patch(doc, ops: list) -> dict:
    """RFC 6902 add/remove/replace/move/copy/test."""
    doc = copy.deepcopy(doc)
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    try:
        for op in ops:
            kind, parts = op["op"], _pointer(op["path"])
            if kind == "test":
                node = doc
                for p in parts:
                    node = node[int(p)] if isinstance(node, list) else node[p]
                if node != op["value"]:
                    raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: test failed at {op['path']}")
                continue
            if kind in ("move", "copy"):
                src = _pointer(op["from"])
                node = doc
                for p in src:
                    node = node[int(p)] if isinstance(node, list) else node[p]
                value = copy.deepcopy(node)
                if kind == "move":
                    sp = _parent(doc, src)
                    del sp[int(src[-1]) if isinstance(sp, list) else src[-1]]
                kind, op = "add", {"value": value}
            parent = _parent(doc, parts)
            last = parts[-1]
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(idx, op["value"])
                elif kind == "remove":
                    del parent[idx]
                elif kind == "replace":
                    parent[idx] = op["value"]
            else:
                if kind in ("remove", "replace") and last not in parent:
                    raise ApiError(422, "Invalid", f"the server rejected our request: {kind} operation does not apply: doc is missing path: {op['path']}")
                if kind == "remove":
                    del parent[last]
                else:
                    parent[last] = op["value"]
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        if isinstance(exc, ApiError):
            raise
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: {exc}") from None
    return doc


def strategic_merge_patch(target, patch):
    """Strategic merge without per-field merge keys: lists are replaced, as merge patch does.

    Enough for the sandbox's clients, which patch labels, annotations and scalar fields.
    """
    return merge_patch(target, patch)


def apply_patch(existing: dict | None, applied: dict) -> dict:
    """Server-side apply, approximated: the applied configuration is merged over the live
    object (lists replaced). Field ownership and conflicts are not tracked (the caller
    records the manager in managedFields)."""
    return merge_patch(copy.deepcopy(existing) if existing else {}, applied)
