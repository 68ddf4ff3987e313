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


class Preempted(Evicted):
    """Kueue suspended the cluster while its job ran (a higher-priority workload took its
    quota, or its queue was stopped); ridden out up to max_preemptions, then raised."""


class ForeignCluster(KfpRayError):
    """A RayCluster of that name exists and belongs to another run or task."""


class JobFailed(KfpRayError):
    """The Ray job ended FAILED or STOPPED."""


class JobLost(JobFailed):
    """The dashboard answers but no longer knows the job (a restarted head lost it)."""


class JobTimeout(KfpRayError):
    """The Ray job did not finish in time (it has been stopped)."""


class Unreachable(KfpRayError):
    """The Ray dashboard or the Kubernetes API stayed unreachable longer than the task
    tolerates (outage_tolerance_seconds)."""


class AccessDenied(KfpRayError):
    """The API refused this identity (401 or 403): retrying cannot help. `status` is kept
    so that callers that degrade on 403 (queues.py) still can."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class Cancelled(BaseException):
    """The task was cancelled (SIGTERM). A BaseException, like KeyboardInterrupt, so that no
    `except Exception` swallows it: cleanup code sees it, and it reaches the top.

    `at` is when the signal came (time.monotonic()): cleanup spends only what is left of the
    grace period Kubernetes gives before SIGKILL."""

    def __init__(self, message: str = "the task was cancelled (SIGTERM)", at: float | None = None):
        import time

        super().__init__(message)
        self.at = time.monotonic() if at is None else at
