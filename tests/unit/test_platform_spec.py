"""What each release's KFP API server makes of kfp-kubernetes settings (sandbox/pipelines_api/
platform_spec.py): RHOAI 3.3's (2.14.3 fork) refuses a run whose settings carry a field it does
not know, 2.25's (2.5.0) drops that executor's pod labels; compiled/ passes on 3.3."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfp_ray_sandbox.pipelines_api import platform_spec
from kfp_ray_sandbox.pipelines_api.store import PipelineStore, parse_package
from kfp_ray_sandbox.pipelines_api.wire import ApiError

ROOT = Path(__file__).resolve().parents[2]


def compiled(name: str) -> dict:
    docs = list(yaml.safe_load_all((ROOT / "compiled" / f"{name}.yaml").read_text()))
    return {"pipeline_spec": docs[0], "platform_spec": docs[1] if len(docs) > 1 else {}}


def with_security_context(spec: dict) -> dict:
    executors = platform_spec.executors(spec)
    first = sorted(executors)[0]
    executors[first]["securityContext"] = {"runAsNonRoot": True}  # kfp-kubernetes 2.17's set_security_context
    return spec


@pytest.mark.parametrize("name", ["ray_training", "fashion_mnist", "xgboost_tune", "interactive_train", "kfp_ray_gc"])
def test_the_default_build_is_what_rhoai_3_3s_server_takes(name):
    spec = compiled(name)
    assert {label: platform_spec.unknown_fields(c, "rhoai-3.3") for label, c in platform_spec.executors(spec).items()
            if platform_spec.unknown_fields(c, "rhoai-3.3")} == {}
    PipelineStore("sandbox", "rhoai-3.3").create_run({"display_name": name, "pipeline_spec": spec})


def test_rhoai_3_3_refuses_a_field_its_kfp_does_not_know_naming_it():
    spec = with_security_context(compiled("xgboost_tune"))
    with pytest.raises(ApiError) as exc:
        PipelineStore("sandbox", "rhoai-3.3").create_run({"display_name": "x", "pipeline_spec": spec})
    assert exc.value.http == 500 and 'failed to unmarshal kubernetes config: proto: unknown field "securityContext"' in \
        exc.value.message


def test_known_fields_are_read_under_their_proto_names_too_and_nested_ones_are_checked():
    config = {"secret_as_env": [{"secret_name_parameter": {"componentInputParameter": "x"}, "optional": True,
                                 "keyToEnv": [{"secretKey": "a", "envVar": "A", "what": 1}]}],
              "podMetadata": {"labels": {"any": "label"}}}
    assert platform_spec.unknown_fields(config, "rhoai-3.3") == ["secret_as_env.keyToEnv.what"]
    assert platform_spec.unknown_fields(config, "rhoai-2.25") == ["secret_as_env.optional", "secret_as_env.keyToEnv.what"]


def test_rhoai_2_25_takes_the_run_but_drops_that_executors_pod_metadata():
    from kfp_ray_sandbox.pipelines_api.workflow import Engine

    engine = Engine.__new__(Engine)
    engine.store = PipelineStore("sandbox", "rhoai-2.25")
    kept = {"podMetadata": {"labels": {"a": "b"}}, "secretAsEnv": [{"secretName": "s", "keyToEnv": []}]}
    unknown = {"podMetadata": {"labels": {"a": "b"}}, "securityContext": {"runAsNonRoot": True}}
    out = engine._as_compiled({"exec-a": kept, "exec-b": unknown})
    assert out["exec-a"] == kept and "podMetadata" not in out["exec-b"]
    spec = with_security_context(compiled("xgboost_tune"))
    engine.store.create_run({"display_name": "x", "pipeline_spec": spec})  # not refused on 2.5.0


# --- the pipeline spec: what kfp 2.17 writes that neither release's KFP knows -------------------------
def _compile(pipeline) -> dict:
    """What kfp 2.17's compiler writes for `pipeline`, as the server stores an upload."""
    import tempfile

    from kfp import compiler

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.yaml"
        compiler.Compiler().compile(pipeline, str(path))
        return parse_package(path.read_text())


def _importer_to_workspace():
    from kfp import dsl

    @dsl.pipeline(name="imports", pipeline_config=dsl.PipelineConfig(workspace=dsl.WorkspaceConfig(size="1Gi")))
    def imports():
        dsl.importer(artifact_uri="s3://b/k", artifact_class=dsl.Dataset, download_to_workspace=True)
    return imports


def _ttl():
    from kfp import dsl

    @dsl.component(base_image="python:3.11")
    def noop():
        pass

    @dsl.pipeline(name="ttl", pipeline_config=dsl.PipelineConfig(ttl_seconds_after_finished=60))
    def ttl():
        noop()
    return ttl


@pytest.mark.parametrize("server", ["rhoai-3.3", "rhoai-2.25"])
@pytest.mark.parametrize("make, kind, field", [
    (_importer_to_workspace, "invalid v2 pipeline spec", "downloadToWorkspace"),
    (_ttl, "cannot unmarshal platform specific configs", "resourceTtlOnCompletion"),
])
def test_a_pipeline_using_what_kfp_2_17_added_is_refused_at_upload_and_as_an_inline_run(server, make, kind, field):
    spec = _compile(make())
    store = PipelineStore("sandbox", server)
    pipeline = store.create_pipeline("p")
    with pytest.raises(ApiError) as exc:
        store.create_version(pipeline["pipeline_id"], "v1", spec)
    assert exc.value.http == 400 and f'{kind}: proto: unknown field "{field}"' in exc.value.message
    with pytest.raises(ApiError) as exc:
        store.create_run({"display_name": "r", "pipeline_spec": spec})
    assert f'Failed to create a run: {kind}: proto: unknown field "{field}"' in exc.value.message


@pytest.mark.parametrize("server", ["rhoai-3.3", "rhoai-2.25"])
@pytest.mark.parametrize("name", ["ray_training", "fashion_mnist", "xgboost_tune", "interactive_train", "kfp_ray_gc"])
def test_the_compiled_pipelines_use_nothing_newer_than_either_releases_kfp(server, name):
    assert platform_spec.newer_fields(compiled(name), server) is None
