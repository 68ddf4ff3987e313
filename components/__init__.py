"""kfp-ray KFP components: one folder each, thin typed wrappers over the runtime library
(runtime/kfp_ray), which travels inside every compiled component."""

# Set to 1 where every task runs in an environment that already has the components' packages
# and the KFP SDK (pipelines/local.py sets it for kfp.local runs of Python pipelines): the
# components are then built without their pip installs, which there would only check, at
# seconds of CPU per task. Read by components._build when a component module is imported.
PREINSTALLED_ENV = "KFP_RAY_PREINSTALLED"
