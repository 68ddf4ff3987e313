"""KFP's Argo compiler in Python (compiler.py) and the Go JSON it writes (gojson.py)."""

from .compiler import (
                       ANNOTATION_RUN_NAME,
                       KFP_VERSIONS,
                       LABEL_RUN_ID,
                       compile_workflow,
                       run_workflow,
                       validate_pipeline_job_inputs,
)
from .gojson import go_json, stably_marshal_json

__all__ = ["ANNOTATION_RUN_NAME", "KFP_VERSIONS", "LABEL_RUN_ID", "compile_workflow", "go_json", "run_workflow",
           "stably_marshal_json", "validate_pipeline_job_inputs"]
