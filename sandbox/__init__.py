"""The embedded default cluster: a local OpenShift AI (Kubernetes API, Kueue, KubeRay with
real Ray, S3) that the real kubernetes client and CodeFlare SDK talk to unmodified."""

__all__ = ["Sandbox", "wait_until"]


def __getattr__(name: str):
    # lazily, so that a submodule (wheelhouse.py at set-up, while the venv's other packages
    # are still installing) imports without the API server's stack
    if name in __all__:
        from . import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
