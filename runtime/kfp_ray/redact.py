"""Keep secrets out of logs, exceptions and artifacts."""

from __future__ import annotations

import os
import re

SECRET_ENV_KEYS = ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN")
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+")


def secret_values() -> list[str]:
    """Values that must never be printed: S3 keys from the environment and the pod's token."""
    values = [os.environ[k] for k in SECRET_ENV_KEYS if os.environ.get(k)]
    token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    if os.path.exists(token_file):
        try:
            values.append(open(token_file).read().strip())
        except OSError:
            pass
    return [v for v in values if len(v) >= 4]


def redact(text: str, extra: list[str] | tuple[str, ...] = ()) -> str:
    text = _BEARER.sub(r"\1[REDACTED]", text)
    for value in sorted({*secret_values(), *extra}, key=len, reverse=True):
        if value:
            text = text.replace(value, "[REDACTED]")
    return text
