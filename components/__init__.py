"""kfp-ray KFP components: one folder each, thin typed wrappers over the runtime library
(runtime/kfp_ray), which travels inside every compiled component."""

# How the components are built, read from the environment when a component module is imported
# (components._build). `python -m pipelines compile` sets them from its options.
# 1: every task runs where the components' packages and the KFP SDK are installed (kfp.local runs
# of Python pipelines, pipelines/local.py): no pip installs, which there would only check.
PREINSTALLED_ENV = "KFP_RAY_PREINSTALLED"
# An image with them (built from Containerfile): every task runs in it, with no pip installs.
IMAGE_ENV = "KFP_RAY_COMPONENT_IMAGE"
# The pip path from this index instead of PyPI (a disconnected cluster's mirror), and the one
# host pip may reach without TLS verification.
PIP_INDEX_URL_ENV = "KFP_RAY_PIP_INDEX_URL"
PIP_TRUSTED_HOST_ENV = "KFP_RAY_PIP_TRUSTED_HOST"
