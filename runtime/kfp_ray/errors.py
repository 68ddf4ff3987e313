"""Errors that say what went wrong and what to change, without secrets."""

from __future__ import annotations


class KfpRayError(Exception):
    """Base class: a message a pipeline user can act on."""


class InputError(KfpRayError, ValueError):
    """A component input is invalid; raised before anything is created."""

    def __init__(self, field: str, problem: str, fix: str):
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}. Fix: {fix}")


class InputErrors(KfpRayError, ValueError):
    """Several invalid inputs, reported together."""

    def __init__(self, errors: list[InputError]):
        self.errors = errors
        super().__init__("invalid inputs:\n" + "\n".join(f"  - {e}" for e in errors))


class ClusterError(KfpRayError):
    """The RayCluster could not be provisioned (it has been deleted)."""


class AdmissionTimeout(ClusterError):
    """Kueue did not admit the cluster in time."""


class StartupTimeout(ClusterError):
    """The cluster was admitted but its pods did not become ready in time."""


class PodsFailing(ClusterError):
    """Pods cannot start (image pull failure, unschedulable, KubeRay cannot create them)."""


class Evicted(ClusterError):
    """Kueue evicted the cluster too often (pods not ready within its pods-ready timeout)."""


class ForeignCluster(KfpRayError):
    """A RayCluster of that name exists and belongs to another run or task."""


class JobFailed(KfpRayError):
    """The Ray job ended FAILED or STOPPED."""


class JobTimeout(KfpRayError):
    """The Ray job did not finish in time (it has been stopped)."""


class Cancelled(KfpRayError):
    """The task was cancelled (SIGTERM): what it started has been stopped."""
