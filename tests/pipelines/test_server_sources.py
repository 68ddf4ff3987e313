"""upload, submit and schedule send the YAML they are given to the sandbox's Data Science
Pipelines server: --from DIR (a build folder, here one whose kfp_ray_gc has another default),
--file PATH, and, where there is no compiled/ (an installed wheel), NAME compiled on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfp_ray.pipelines import registry
from kfp_ray.pipelines.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def build(tmp_path) -> Path:
    """A build folder whose kfp_ray_gc waits 123 s, not 300, per deletion: told apart on the server."""
    docs = list(yaml.safe_load_all((ROOT / "compiled" / "kfp_ray_gc.yaml").read_text()))
    docs[0]["root"]["inputDefinitions"]["parameters"]["timeout"]["defaultValue"] = 123.0
    (tmp_path / "kfp_ray_gc.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return tmp_path


def timeout_default(spec: dict) -> float:
    spec = spec.get("pipeline_spec", spec)  # the API's {"pipeline_spec", "platform_spec"} or the spec alone
    return spec["root"]["inputDefinitions"]["parameters"]["timeout"]["defaultValue"]


def test_upload_submit_and_schedule_send_the_build_they_are_given(server_env, kfp_client, build, capsys):
    assert main(["upload", "kfp_ray_gc", "--from", str(build), "--display-name", "gc-from-build"]) == 0
    capsys.readouterr()
    pipeline_id = kfp_client.get_pipeline_id("gc-from-build")
    version = kfp_client.list_pipeline_versions(pipeline_id).pipeline_versions[0]
    assert timeout_default(kfp_client.get_pipeline_version(pipeline_id, version.pipeline_version_id).pipeline_spec) == 123

    # pipeline-runner may not sweep kube-system: the run fails at once, touching nothing
    assert main(["submit", "--file", str(build / "kfp_ray_gc.yaml"), "--experiment", "cli-sources",
                 "--param", "namespace=kube-system"]) == 0
    out = capsys.readouterr().out
    run_id = out.split("submitted run ", 1)[1].split()[0]
    assert timeout_default(kfp_client.get_run(run_id).pipeline_spec) == 123

    assert main(["schedule", "kfp_ray_gc", "--from", str(build), "--cron", "0 0 3 * * *", "--no-catchup",
                 "--schedule-name", "gc-from-build"]) == 0
    rr_id = capsys.readouterr().out.split("recurring run ", 1)[1].split(":")[0]
    try:
        assert timeout_default(kfp_client.get_recurring_run(rr_id).pipeline_spec) == 123
    finally:
        kfp_client.delete_recurring_run(rr_id)


def test_without_compiled_the_pipeline_is_compiled_and_uploaded(server_env, kfp_client, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(registry, "COMPILED", tmp_path / "no-compiled-in-a-wheel")
    assert main(["upload", "kfp_ray_gc", "--display-name", "gc-from-a-wheel"]) == 0
    out = capsys.readouterr().out
    assert "compiling kfp_ray_gc" in out and "pipeline gc-from-a-wheel (" in out
    pipeline_id = kfp_client.get_pipeline_id("gc-from-a-wheel")
    version = kfp_client.list_pipeline_versions(pipeline_id).pipeline_versions[0]
    assert timeout_default(kfp_client.get_pipeline_version(pipeline_id, version.pipeline_version_id).pipeline_spec) == 300
