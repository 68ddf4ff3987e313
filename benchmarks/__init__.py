"""kfp-ray benchmarks: `python -m benchmarks` (see README.md)."""
