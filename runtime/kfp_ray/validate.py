"""Input checks that run before anything is created; each error names the field and the fix."""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import InputError, InputErrors

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# KubeRay derives names from the cluster's: `<name>-head-svc`, `ray-dashboard-<name>` (Route),
# the worker group `small-group-<name>` (a label value, 63 at most): 40 leaves room for all.
MAX_CLUSTER_NAME = 40
_QUANTITY = re.compile(r"^([+-]?\d+(\.\d+)?|[+-]?\.\d+)(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$")
_SUFFIX = {"": 1, "m": Fraction(1, 1000), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def quantity(value) -> Fraction:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(value)
    return Fraction(m.group(1)) * _SUFFIX[m.group(3) or ""]


class Checker:
    """Collects every problem, then raises them together."""

    def __init__(self):
        self.errors: list[InputError] = []

    def fail(self, field: str, problem: str, fix: str) -> None:
        self.errors.append(InputError(field, problem, fix))

    def done(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise InputErrors(self.errors)

    def name(self, field: str, value: str, max_len: int = MAX_CLUSTER_NAME) -> None:
        if not value or not DNS1035.match(value) or len(value) > max_len:
            self.fail(field, f"{value!r} is not a valid name",
                      f"use at most {max_len} lower-case letters, digits and '-', starting with a letter and not "
                      "ending with '-' (e.g. 'mnist-train')")

    def cpu(self, field: str, value, allow_zero: bool = False) -> None:
        try:
            q = quantity(value)
        except (ValueError, TypeError):
            self.fail(field, f"{value!r} is not a CPU quantity", "give cores like '2' or '1.5', or millicores like '500m'")
            return
        if q < 0 or (q == 0 and not allow_zero):
            self.fail(field, f"{value!r} must be {'zero or ' if allow_zero else ''}more than zero", "give e.g. '1' or '500m'")

    def memory(self, field: str, value) -> None:
        text = str(value).strip()
        hint = ""
        m = re.match(r"^(\d+(?:\.\d+)?)\s*([KMGTP])B$", text, re.IGNORECASE)
        if m:
            hint = f" ('{text}' is not Kubernetes syntax: '{m.group(1)}{m.group(2).upper()}' means 10^n bytes, '{m.group(1)}{m.group(2).upper()}i' 2^n)"
        try:
            q = quantity(value)
        except (ValueError, TypeError):
            self.fail(field, f"{value!r} is not a memory quantity{hint}", "use Kubernetes units, e.g. '4Gi' or '4G'")
            return
        if q <= 0:
            self.fail(field, f"{value!r} must be more than zero", "give e.g. '4Gi'")
        elif q < 2**20 and not isinstance(value, (int, float)):
            self.fail(field, f"{value!r} is {int(q)} bytes, far too little for Ray", "add a unit, e.g. '4Gi'")

    def at_least(self, field: str, value, minimum: int, fix: str) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(field, f"{value!r} must be an integer of at least {minimum}", fix)

    def positive_seconds(self, field: str, value) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
            self.fail(field, f"{value!r} must be a number of seconds above zero", f"give e.g. {field}=600")

    def env(self, field: str, env: dict) -> None:
        if not isinstance(env, dict):
            self.fail(field, "must be a mapping of variable names to values", 'give e.g. {"EPOCHS": "10"}')
            return
        for k, v in env.items():
            if not ENV_NAME.match(str(k)):
                self.fail(f"{field}[{k!r}]", "is not a valid environment variable name", "use letters, digits and '_', not starting with a digit")
            if not isinstance(v, (str, int, float, bool)):
                self.fail(f"{field}[{k!r}]", f"value {v!r} is not a string", "give plain string values")

    def labels(self, field: str, labels: dict) -> None:
        if not isinstance(labels, dict):
            self.fail(field, "must be a mapping", 'give e.g. {"team": "vision"}')
            return
        for k, v in labels.items():
            if not LABEL_KEY.match(str(k)) or len(str(k).rsplit("/", 1)[-1]) > 63:
                self.fail(f"{field}[{k!r}]", "is not a valid label key", "use e.g. 'team' or 'example.com/team'")
            if not isinstance(v, str) or not LABEL_VALUE.match(v) or len(v) > 63:
                self.fail(f"{field}[{k!r}]", f"value {v!r} is not a valid label value",
                          "use at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric")

    def not_empty(self, field: str, value: str, fix: str) -> None:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, "is empty", fix)


def sanitize_name(text: str, prefix: str = "ray-", max_len: int = MAX_CLUSTER_NAME) -> str:
    """A valid cluster name derived from free text (a run id): lower-case, '-' for anything
    else, prefixed so it starts with a letter, cut to length."""
    body = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    name = (prefix + body)[:max_len].rstrip("-")
    return name or prefix.rstrip("-")


def label_value(text: str) -> str:
    """Text made into a valid label value (63 at most)."""
    v = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)
