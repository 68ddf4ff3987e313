"""Label and field selectors, with the apiserver's syntax.

Label: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-separated (AND).
Field: `path=value` / `path!=value` over dotted object paths (metadata.name, status.phase,
involvedObject.name, type, ...).
"""

from __future__ import annotations

import re

from .errors import bad_request

_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def label_matcher(selector: str | None):
    if not selector:
        return lambda labels: True
    tests = []
    for term in _split(selector):
        m = _SET_RE.match(term)
        if m:
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                tests.append(lambda ls, k=key, vs=values: ls.get(k) in vs)
            else:
                tests.append(lambda ls, k=key, vs=values: ls.get(k) not in vs)
        elif "!=" in term:
            k, v = (s.strip() for s in term.split("!=", 1))
            tests.append(lambda ls, k=k, v=v: ls.get(k) != v)
        elif "=" in term:
            k, v = (s.strip() for s in re.split(r"==?", term, maxsplit=1))
            tests.append(lambda ls, k=k, v=v: ls.get(k) == v)
        elif term.startswith("!"):
            tests.append(lambda ls, k=term[1:].strip(): k not in ls)
        elif re.fullmatch(r"[A-Za-z0-9./_-]+", term):
            tests.append(lambda ls, k=term: k in ls)
        else:
            raise bad_request(f"unable to parse requirement: invalid label selector {selector!r}")
    return lambda labels: all(t(labels or {}) for t in tests)


def _lookup(obj: dict, path: str):
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def field_matcher(selector: str | None):
    if not selector:
        return lambda obj: True
    tests = []
    for term in _split(selector):
        if "!=" in term:
            path, value = term.split("!=", 1)
            tests.append(lambda o, p=path.strip(), v=value.strip(): str(_lookup(o, p) or "") != v)
        elif "=" in term:
            path, value = re.split(r"==?", term, maxsplit=1)
            tests.append(lambda o, p=path.strip(), v=value.strip(): str(_lookup(o, p) or "") == v)
        else:
            raise bad_request(f"invalid field selector {selector!r}: expected key=value or key!=value")
    return lambda obj: all(t(obj) for t in tests)


def selector_matches(selector: dict | None, labels: dict) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels): nil matches nothing, {} everything."""
    if selector is None:
        return False
    labels = labels or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True
