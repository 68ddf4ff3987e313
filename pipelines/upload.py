"""`kfp-ray upload NAME [--version V] [--file PATH | --from DIR]`: a compiled pipeline onto a Data
Science Pipelines server, where the RHOAI dashboard lists it (Data Science Pipelines > Pipelines)
and runs and schedules start from it. A pipeline already there by that name gets a new version.
The YAML sent is --file PATH, DIR/NAME.yaml of a `kfp-ray compile --out DIR` build, or the
default build (compiled/NAME.yaml, or NAME compiled now where there is no compiled/)."""

from __future__ import annotations

import argparse
import time

from . import connection, package


def add_parser(sub) -> None:
    p = sub.add_parser("upload", help="upload a compiled pipeline (a new version if it exists)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    package.add_arguments(p)
    p.add_argument("--version", help="the version's name (default: NAME-<UTC time>)")
    p.add_argument("--display-name", help="the pipeline's name on the server (default: NAME)")
    connection.add_arguments(p)
    p.set_defaults(fn=cmd_upload)


def upload(client, name: str, display_name: str, version: str | None, path: str):
    """(pipeline id, version) for the compiled YAML at `path`: a new pipeline, or a new
    version of the one by that display name."""
    pipeline_id = client.get_pipeline_id(display_name)
    if pipeline_id is None:
        pipeline = client.upload_pipeline(path, pipeline_name=display_name)
        got = client.list_pipeline_versions(pipeline.pipeline_id, page_size=1, sort_by="created_at desc")
        return pipeline.pipeline_id, got.pipeline_versions[0]
    version = version or f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    return pipeline_id, client.upload_pipeline_version(path, version, pipeline_id=pipeline_id)


def cmd_upload(args) -> int:
    with package.resolve(args) as pkg:
        client = connection.connect(args)
        display_name = args.display_name or pkg.name
        pipeline_id, version = upload(client, pkg.name, display_name, args.version, str(pkg.path))
    print(f"pipeline {display_name} ({pipeline_id}): version {version.display_name} ({version.pipeline_version_id})")
    return 0
