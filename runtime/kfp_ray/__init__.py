"""kfp-ray runtime: the logic behind the kfp-ray KFP components.

Written once; each compiled component carries the part of it that its function reaches
(components/_slim.py: followed imports, stripped, compressed), so a cluster needs nothing of
ours but the compiled YAML, and the YAML stays within Argo's limits (`kfp-ray compile --check`). Heavy libraries (codeflare_sdk, ray, kubernetes) are imported inside
the functions that need them, never at import time.
"""

__version__ = "0.1.0"
