"""The embedded default cluster: a local OpenShift AI (Kubernetes API, Kueue, KubeRay with
real Ray, S3) that the real kubernetes client and CodeFlare SDK talk to unmodified."""

from .core import Sandbox, wait_until

__all__ = ["Sandbox", "wait_until"]
