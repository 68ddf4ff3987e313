"""Input checks that run before anything is created; each error names the field and the fix."""

from __future__ import annotations

import hashlib
import re
from fractions import Fraction

from .errors import InputError, InputErrors

# Kubernetes name rules (k8s.io/apimachinery pkg/util/validation): a DNS-1035 label (Service
# names, and so RayCluster names: KubeRay names the head Service after the cluster), a DNS-1123
# label (namespaces) and a DNS-1123 subdomain (Secrets, and most objects' names).
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# KubeRay derives names from the cluster's: `<name>-head-svc`, `ray-dashboard-<name>` (Route),
# the worker group `small-group-<name>` (a label value, 63 at most): 40 leaves room for all.
MAX_CLUSTER_NAME = 40
# A resource.Quantity as k8s.io/apimachinery v0.31 parses it (pkg/api/resource/quantity.go
# ParseQuantity, suffix.go): <sign>?<number><suffix>, number one of 1, 1.5, 1. or .5; suffix a
# binary SI one (Ki..Ei), a decimal SI one (n, u, m, none, k, M, G, T, P, E: n and u too,
# though the grammar in its comment leaves them out) or a decimal exponent (e3, E-2, E+6:
# a whole number). "1E" is exa, "1E3" a thousand.
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_SUFFIX = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 10**3, "M": 10**6,
           "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(value) -> Fraction:
    """A Kubernetes quantity's value (ValueError if Kubernetes would refuse it)."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float)):
        return Fraction(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(value)
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix in _SUFFIX:
        return number * _SUFFIX[suffix]
    return number * Fraction(10) ** int(suffix[1:])  # a decimal exponent


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
        """A DNS-1035 label: what a RayCluster's name must be (its head Service is named after it)."""
        if not isinstance(value, str) or not DNS1035.match(value) or len(value) > max_len:
            self.fail(field, f"{value!r} is not a valid name",
                      f"use at most {max_len} lower-case letters, digits and '-', starting with a letter and not "
                      "ending with '-' (e.g. 'mnist-train')")

    def dns_label(self, field: str, value: str, max_len: int = 63) -> None:
        """A DNS-1123 label (namespaces): may start with a digit."""
        if not isinstance(value, str) or not DNS1123_LABEL.match(value) or len(value) > max_len:
            self.fail(field, f"{value!r} is not a valid name",
                      f"use at most {max_len} lower-case letters, digits and '-', starting and ending with a letter "
                      "or digit (e.g. 'team-a')")

    def dns_subdomain(self, field: str, value: str, max_len: int = 253) -> None:
        """A DNS-1123 subdomain (Secrets, LocalQueues): dot-separated DNS-1123 labels."""
        if not isinstance(value, str) or not DNS1123_SUBDOMAIN.match(value) or len(value) > max_len:
            self.fail(field, f"{value!r} is not a valid name",
                      f"use at most {max_len} lower-case letters, digits, '-' and '.', starting and ending with a "
                      "letter or digit (e.g. 'aws-connection-minio')")

    def image(self, field: str, value: str) -> None:
        """A container image reference the kubelet can parse (docker reference grammar)."""
        problem = image_reference_problem(value)
        if problem:
            self.fail(field, f"{value!r} is not a valid image reference ({problem})",
                      "give e.g. 'quay.io/modh/ray:2.52.1-py311-cu121' or '<registry>/<repository>@sha256:<digest>', "
                      "repository in lower case; leave empty for the RHOAI Ray image")

    def limit_not_below(self, field: str, limit, request_field: str, request) -> None:
        """A limit, when given, must be at least the request (Kubernetes refuses the pod otherwise)."""
        try:
            below = quantity(limit) < quantity(request)
        except (ValueError, TypeError):
            return  # the quantity checks report it
        if below:
            self.fail(field, f"{limit!r} is below the request {request_field}={request!r}",
                      f"give a limit of at least {request!r}, or leave {field} empty (the limit is then the request)")

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

    def positive_seconds(self, field: str, value, example: float = 600) -> None:
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or value == float("inf"):
            self.fail(field, f"{value!r} must be a number of seconds above zero", f"give e.g. {field}={example:g}")

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

    def tolerations(self, field: str, tolerations) -> None:
        """Pod tolerations as Kubernetes v1.31 validates them (ValidateTolerations)."""
        example = '[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]'
        if not isinstance(tolerations, list) or not all(isinstance(t, dict) for t in tolerations):
            self.fail(field, "must be a list of toleration objects", f"give e.g. {example}")
            return
        for i, t in enumerate(tolerations):
            f = f"{field}[{i}]"
            unknown = sorted(set(t) - {"key", "operator", "value", "effect", "tolerationSeconds"})
            op, key, value, effect = t.get("operator") or "Equal", t.get("key") or "", t.get("value") or "", t.get("effect") or ""
            if unknown:
                self.fail(f, f"{t!r} is not a toleration (unknown {', '.join(unknown)})",
                          "use keys key/operator(Equal|Exists)/value/effect/tolerationSeconds")
            elif op not in ("Equal", "Exists"):
                self.fail(f, f"operator {op!r} is not Equal or Exists", "use keys key/operator(Equal|Exists)/value/effect")
            elif key and (not LABEL_KEY.match(str(key)) or len(str(key).rsplit("/", 1)[-1]) > 63):
                self.fail(f, f"key {key!r} is not a valid taint key", "use e.g. 'nvidia.com/gpu'")
            elif not key and op != "Exists":
                self.fail(f, "an empty key matches every taint only with operator Exists",
                          'give the taint\'s key, or "operator": "Exists" to tolerate every taint')
            elif op == "Exists" and value:
                self.fail(f, f"value {value!r} must be empty with operator Exists", "drop the value, or use operator Equal")
            elif op == "Equal" and (not isinstance(value, str) or not LABEL_VALUE.match(value) or len(value) > 63):
                self.fail(f, f"value {value!r} is not a valid taint value", "use at most 63 letters, digits, '-', '_' or '.'")
            elif effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
                self.fail(f, f"effect {effect!r} is not a taint effect", "use NoSchedule, PreferNoSchedule or NoExecute")
            elif "tolerationSeconds" in t:
                secs = t["tolerationSeconds"]
                integral = isinstance(secs, int) or (isinstance(secs, float) and secs.is_integer())
                if isinstance(secs, bool) or not integral:
                    self.fail(f"{f}.tolerationSeconds", f"{secs!r} is not an integer",
                              "give whole seconds, e.g. 300 (how long the pod stays bound to a node with the "
                              "NoExecute taint)")
                elif effect != "NoExecute":
                    self.fail(f"{f}.tolerationSeconds", "applies only to effect NoExecute",
                              'set "effect": "NoExecute", or drop tolerationSeconds')

    def s3_prefix(self, field: str, value: str) -> None:
        """A key prefix inside the data connection's bucket (not a URI)."""
        problem = s3_key_problem(value)
        if problem:
            self.fail(field, f"{value!r} is not a usable S3 key prefix ({problem})",
                      "give a relative prefix like 'projects/mnist/run-7' (letters, digits and !-_.*'() between "
                      "'/'), or leave it empty for runs/<run id>; the bucket comes from the data connection")

    def pip_mirror(self, index_field: str, index_url: str, host_field: str, trusted_host: str) -> None:
        """A PyPI mirror's simple index (http(s)), and the one host pip may reach without TLS
        verification, which belongs to it."""
        if index_url and not re.match(r"^https?://[^\s/]+", index_url):
            self.fail(index_field, f"{index_url!r} is not an http(s) URL",
                      "give the mirror's simple index, e.g. https://nexus.example.com/repository/pypi/simple")
        if trusted_host and not index_url:
            self.fail(host_field, f"is set without {index_field}", f"give the mirror's {index_field} too")
        if trusted_host and not re.fullmatch(r"[A-Za-z0-9.-]+(:\d+)?", trusted_host):
            self.fail(host_field, f"{trusted_host!r} is not a host[:port]", "give e.g. nexus.example.com")

    def not_empty(self, field: str, value: str, fix: str) -> None:
        if not isinstance(value, str) or not value.strip():
            self.fail(field, "is empty", fix)


# distribution/reference v0.6 regexp.go, the grammar the kubelet parses image names with
# (ParseNormalizedNamed): [domain[:port]/]path[:tag][@digest]; Go's \w is ASCII.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_NAME = rf"(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[0-9A-Za-z_][0-9A-Za-z_.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"^({_NAME})(?::({_TAG}))?(?:@({_DIGEST}))?$")
MAX_REPOSITORY_NAME = 255


def image_reference_problem(value) -> str:
    """Why `value` is not an image reference the kubelet accepts ('' if it is one)."""
    if not isinstance(value, str) or not value:
        return "empty"
    if value != value.strip() or any(ch.isspace() for ch in value):
        return "it contains spaces"
    m = IMAGE_REFERENCE.match(value)
    if not m:
        if IMAGE_REFERENCE.match(value.lower()):
            return "the repository name must be lower case"
        if "://" in value:
            return "no scheme: an image is not a URL"
        return "invalid reference format"
    if len(m.group(1)) > MAX_REPOSITORY_NAME:
        return f"the repository name is longer than {MAX_REPOSITORY_NAME} characters"
    if re.fullmatch(r"[a-f0-9]{64}", m.group(1)):
        return "a 64-character hexadecimal string is an image id, not a repository name"
    return ""


# AWS's "safe characters" for object keys (S3 User Guide, Object key naming guidelines): others
# need URL encoding or break tools; '/' separates the folders a prefix is made of.
_S3_SAFE = re.compile(r"^[0-9A-Za-z!_.*'()/-]+$")
MAX_S3_PREFIX = 900  # S3 keys are at most 1024 bytes: room for the run's file names


def s3_key_problem(value) -> str:
    """Why `value` is not a usable key prefix ('' if it is one; empty is fine: the default)."""
    if not isinstance(value, str):
        return "not a string"
    if not value:
        return ""
    if "://" in value:
        return "a URI, not a key prefix"
    if not _S3_SAFE.match(value):
        bad = sorted({ch for ch in value if not _S3_SAFE.match(ch)})
        return f"characters {''.join(bad)!r} are not safe in S3 keys"
    parts = value.strip("/").split("/")
    if any(p == "" for p in parts):
        return "an empty folder ('//')"
    if any(p in (".", "..") for p in parts):
        return "'.' and '..' are not folders in S3"
    if len(value.encode()) > MAX_S3_PREFIX:
        return f"longer than {MAX_S3_PREFIX} bytes"
    return ""


def sanitize_name(text: str, prefix: str = "ray-", max_len: int = MAX_CLUSTER_NAME) -> str:
    """A valid cluster name derived from free text (a run id): lower-case, '-' for anything
    else, prefixed so it starts with a letter, cut to length."""
    body = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    name = (prefix + body)[:max_len].rstrip("-")
    return name or prefix.rstrip("-")


def short_hash(*parts: str, length: int = 8) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:length]


def task_identity(task_name: str, task_id: str) -> str:
    """One task instance of a run, as KFP 2.17 resolves the placeholders on its Argo backend
    (backend/src/v2/driver/resolve.go): PIPELINE_TASK_NAME_PLACEHOLDER is the task's name in
    its DAG (siblings differ), PIPELINE_TASK_ID_PLACEHOLDER the id of the DAG execution it
    runs in (each ParallelFor iteration is one). Both stay the same when the task is retried."""
    return f"{task_name}.{task_id}" if task_id else task_name


def derive_cluster_name(run_id: str, identity: str, max_len: int = MAX_CLUSTER_NAME) -> str:
    """The cluster name of one task of a run: readable run prefix, then a hash of run and
    task, so two provision tasks of one run never share a name and a retry finds its own."""
    digest = short_hash(run_id, identity)
    return f"{sanitize_name(run_id, max_len=max_len - len(digest) - 1)}-{digest}"


def identity_label(identity: str) -> str:
    """The task identity as a label value: as is when it is one, else shortened with a hash
    (still distinct: labels are compared for ownership)."""
    value = label_value(identity)
    if value == identity:
        return value
    return f"{label_value(identity[:54]).rstrip('-_.')}-{short_hash(identity)}".lstrip("-")


def label_value(text: str) -> str:
    """Text made into a valid label value (63 at most)."""
    v = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)
