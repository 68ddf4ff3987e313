"""Pipelines composed from the kfp-ray components, and their command line
(`kfp-ray ...`)."""
