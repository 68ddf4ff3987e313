"""What each release's KFP API server makes of kfp-kubernetes settings (sandbox/pipelines_api/
platform_spec.py): RHOAI 3.3's (2.14.3 fork) refuses a run whose settings carry a field it does
not know, 2.25's (2.5.0) drops that executor's pod labels; compiled/ passes on 3.3."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfp_ray_sandbox.pipelines_api import platform_spec
from kfp_ray_sandbox.pipelines_api.store import PipelineStore
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
