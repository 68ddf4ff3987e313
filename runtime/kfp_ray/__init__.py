"""kfp-ray runtime: the logic behind the kfp-ray KFP components.

Written once, embedded in every compiled component (it is the `runtime/` folder that
travels as the component's embedded artifact), so a cluster needs nothing of ours but
the compiled YAML. Heavy libraries (codeflare_sdk, ray, kubernetes) are imported inside
the functions that need them, never at import time.
"""

__version__ = "0.1.0"
