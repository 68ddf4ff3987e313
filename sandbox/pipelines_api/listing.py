"""The list calls' filter, sort_by, page_size and page_token, as KFP's API server reads them
(backend/src/apiserver/list and filter, kubeflow/pipelines 2.17.0):
- filter: URL-encoded JSON of a v2beta1 Filter, {"predicates": [{"key", "operation", "<kind>_value"}]},
  the operation by name or number, value keys in camelCase or snake_case (kfp.Client sends
  {"operation": 1, "stringValue": ...});
- sort_by: "field" or "field desc"; page_size: 0 means 20, at most 200;
- page_token: opaque to clients; here base64 of the offset and the query it continues.
"""

from __future__ import annotations

import base64
import json
import re

from .wire import invalid

OPERATIONS = {1: "EQUALS", 2: "NOT_EQUALS", 3: "GREATER_THAN", 5: "GREATER_THAN_EQUALS", 6: "LESS_THAN",
              7: "LESS_THAN_EQUALS", 8: "IN", 9: "IS_SUBSTRING"}
VALUE_KEYS = ("int_value", "long_value", "string_value", "timestamp_value", "int_values", "long_values", "string_values")
DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE = 20, 200


def _snake(key: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def parse_filter(text: str) -> list[tuple[str, str, object]]:
    """[(key, operation, value)] of a filter; 400 for one the real server would refuse."""
    if not text:
        return []
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise invalid(f"Invalid input error: failed to parse valid filter from {text!r}: {exc}") from None
    out = []
    for raw in (spec or {}).get("predicates") or []:
        pred = {_snake(k): v for k, v in raw.items()}
        op = pred.get("operation")
        op = OPERATIONS.get(op, op) if isinstance(op, int) else op
        if op not in OPERATIONS.values():
            raise invalid(f"Invalid input error: invalid predicate operation {pred.get('operation')!r}")
        values = [k for k in VALUE_KEYS if k in pred]
        if len(values) != 1 or not pred.get("key"):
            raise invalid(f"Invalid input error: a predicate needs a key and one value: {raw}")
        value = pred[values[0]]
        if isinstance(value, dict):  # {"values": [...]}
            value = value.get("values", [])
        if values[0].startswith(("int", "long")):
            value = [int(v) for v in value] if isinstance(value, list) else int(value)
        out.append((pred["key"], op, value))
    return out


def _matches(item: dict, key: str, op: str, value) -> bool:
    have = item.get(key)
    if op == "EQUALS":
        return have == value
    if op == "NOT_EQUALS":
        return have != value
    if op == "IN":
        return have in value
    if op == "IS_SUBSTRING":
        return isinstance(have, str) and str(value) in have
    if have is None:
        return False
    return {"GREATER_THAN": have > value, "GREATER_THAN_EQUALS": have >= value,
            "LESS_THAN": have < value, "LESS_THAN_EQUALS": have <= value}[op]


def page(items: list[dict], *, filter_text: str = "", sort_by: str = "", page_size: str | int = 0,
         page_token: str = "", sortable: tuple[str, ...] = ("created_at",)) -> tuple[list[dict], int, str]:
    """(this page's items, how many match in all, the next page's token or "")."""
    if page_token:
        try:
            token = json.loads(base64.urlsafe_b64decode(page_token.encode()))
            offset, filter_text, sort_by = token["offset"], token["filter"], token["sort_by"]
        except (ValueError, KeyError, TypeError):
            raise invalid(f"Invalid input error: invalid page token {page_token!r}") from None
    else:
        offset = 0
    try:
        size = int(page_size or 0) or DEFAULT_PAGE_SIZE
    except ValueError:
        raise invalid(f"Invalid input error: page_size {page_size!r} is not a number") from None
    if size < 0:
        raise invalid("Invalid input error: page_size must not be negative")
    size = min(size, MAX_PAGE_SIZE)
    predicates = parse_filter(filter_text)
    chosen = [i for i in items if all(_matches(i, k, op, v) for k, op, v in predicates)]
    field, _, order = (sort_by or "created_at").partition(" ")
    if field not in sortable:
        raise invalid(f"Invalid input error: cannot sort by {field!r}; sortable: {', '.join(sortable)}")
    if order not in ("", "asc", "desc"):
        raise invalid(f"Invalid input error: sort order {order!r} is neither asc nor desc")
    chosen.sort(key=lambda i: (i.get(field) is None, i.get(field) or ""), reverse=order == "desc")
    window = chosen[offset:offset + size]
    more = offset + size < len(chosen)
    token = base64.urlsafe_b64encode(json.dumps({"offset": offset + size, "filter": filter_text,
                                                 "sort_by": sort_by}).encode()).decode() if more else ""
    return window, len(chosen), token
