"""`kfp-ray compile --image REF` and `--pip-index-url URL`: what the tasks run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kfp_ray.components import _slim
from kfp_ray.pipelines import registry

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "quay.io/example/kfp-ray-components:1.0"


def compile_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def executors(path: Path) -> dict:
    spec = next(yaml.safe_load_all(path.read_text()))
    return spec["deploymentSpec"]["executors"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    image, mirror = tmp_path_factory.mktemp("image"), tmp_path_factory.mktemp("mirror")
    for out, args in ((image, ["--image", IMAGE]),
                      (mirror, ["--pip-index-url", "https://nexus.example.com/repository/pypi/simple",
                                "--pip-trusted-host", "nexus.example.com"])):
        r = compile_cli("--out", str(out), *args)
        assert r.returncode == 0, r.stdout + r.stderr
    return image, mirror


@pytest.mark.parametrize("name", registry.PIPELINES)
def test_image_build_runs_every_task_in_the_image_with_no_installs(name, outputs):
    for ex in executors(outputs[0] / f"{name}.yaml").values():
        c = ex["container"]
        assert c["image"] == IMAGE
        assert "pip install" not in " ".join(c["command"] + c.get("args", []))
        # kfp_ray is the image's: a task carries at most its code_dir (issue 25 item 1)
        program = c["command"][-1]
        assert "__KFP_EMBEDDED_ARCHIVE_B64" not in program
        payload = _slim.payload_of(program)
        assert payload is None or all(n.startswith("code/") for n in _slim.unpack(payload))


@pytest.mark.parametrize("name", registry.PIPELINES)
def test_mirror_build_installs_from_the_mirror_only(name, outputs):
    from kfp_ray.components._build import BASE_IMAGE

    for ex in executors(outputs[1] / f"{name}.yaml").values():
        c = ex["container"]
        command = " ".join(c["command"])
        assert c["image"] == BASE_IMAGE
        assert command.count("pip install") >= 1
        assert command.count("pip install") == command.count(
            "--index-url https://nexus.example.com/repository/pypi/simple --trusted-host nexus.example.com")


def test_the_default_build_keeps_the_pip_path_from_pypi():
    from kfp_ray.components._build import BASE_IMAGE

    for name in registry.PIPELINES:
        for ex in executors(registry.compiled_path(name)).values():
            command = " ".join(ex["container"]["command"])
            assert ex["container"]["image"] == BASE_IMAGE and "'kfp==2.17.0'" in command
            assert "--index-url" not in command


@pytest.mark.parametrize("args,says", [
    (["--image", "Quay.io/UPPER/Case:1"], "--image"),
    (["--image", IMAGE, "--pip-index-url", "https://m/simple"], "--pip-index-url"),
    (["--pip-trusted-host", "m"], "--pip-index-url"),
    (["--pip-index-url", "nexus/simple"], "http(s) URL"),
    (["--image", IMAGE], "--out"),
    (["--image", IMAGE, "--check"], "--check"),
])
def test_bad_options_are_refused_naming_the_option(args, says, tmp_path):
    r = compile_cli(*args)
    assert r.returncode != 0 and says in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())


def test_for_an_older_rhoai_the_yaml_loses_optional_secrets_and_can_fix_the_data_connection(tmp_path):
    """kfp-kubernetes 2.17 writes `optional` on every secretAsEnv: KFP < 2.15 (RHOAI < 3.0)
    refuses it; RHOAI 2.19 also ignores secret names from parameters (docs/rhoai-versions.md)."""
    from kfp_ray.pipelines import compat

    text = (registry.COMPILED / "xgboost_tune.yaml").read_text()
    assert "optional: true" in text and "componentInputParameter: pipelinechannel--data_connection" in text

    def secret_entries(rewritten):
        platform = list(yaml.safe_load_all(rewritten))[1]
        execs = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        return [e for ex in execs.values() for e in ex.get("secretAsEnv", [])]

    newer = secret_entries(compat.rewrite(text, compat.needs((2, 22), ""), ""))
    assert newer and all("optional" not in e for e in newer)
    assert {k["envVar"] for e in newer for k in e["keyToEnv"]} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                                    "AWS_S3_ENDPOINT", "AWS_S3_BUCKET"}
    assert all(e["secretNameParameter"] == {"componentInputParameter": "pipelinechannel--data_connection"} for e in newer)

    fixed = compat.rewrite(text, compat.needs((2, 19), "my-conn"), "my-conn")
    assert all(e["secretName"] == "my-conn" and e["secretNameParameter"] == {"runtimeValue": {"constant": "my-conn"}}
               for e in secret_entries(fixed))
    spec = next(yaml.safe_load_all(fixed))
    assert spec["root"]["inputDefinitions"]["parameters"]["data_connection"]["defaultValue"] == "my-conn"
    assert compat.needs((3, 0), "") == []
    with pytest.raises(ValueError, match="--data-connection"):
        compat.needs((2, 19), "")
    with pytest.raises(ValueError, match="RHOAI 2.19 or newer"):
        compat.needs((2, 16), "")


def test_compile_rhoai_writes_rewritten_yaml_and_refuses_what_cannot_work(tmp_path):
    out = tmp_path / "old"
    r = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", "--out", str(out), "--rhoai", "2.22"],
                       cwd=registry.ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "optional:" not in (out / "ray_training.yaml").read_text().split("(pipelines/compat.py)")[1]
    r = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "compile", "--out", str(out), "--rhoai", "2.19"],
                       cwd=registry.ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "--data-connection NAME" in r.stderr
