"""The set-up's warm installs (wheelhouse.warm_installs): each compiled install script runs once
in a clean task layer against the served index, and a pod with that script then starts from it."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import yaml

from kfp_ray_sandbox import wheelhouse
from kfp_ray_sandbox.pipelines_api import launcher
from kfp_ray_sandbox.rayimage import clean_task_image


def _compiled(tmp_path: Path, kfp: str) -> tuple[Path, list[str]]:
    # KFP's own preamble (kfp 2.17's _get_packages_to_install_command), made unique per run by a comment
    script = (f"# {secrets.token_hex(4)}\nif ! [ -x \"$(command -v pip)\" ]; then python3 -m ensurepip; fi\n"
              f"PIP_DISABLE_PIP_VERSION_CHECK=1 python3 -m pip install --quiet --no-warn-script-location '{kfp}' "
              "'--no-deps' && \"$0\" \"$@\"\n")
    command = ["sh", "-c", script, "sh", "-ec", "python3 -c 'import kfp'"]
    doc = {"deploymentSpec": {"executors": {"exec-a": {"container": {"command": command}},
                                            "exec-b": {"container": {"command": list(command)}}}}}
    (tmp_path / "compiled").mkdir()
    (tmp_path / "compiled" / "p.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path / "compiled", command


def test_each_install_script_runs_once_and_a_pod_with_it_starts_from_its_install(tmp_path):
    kfp = wheelhouse.kfp_requirement(Path(__file__).resolve().parents[2] / "compiled")
    compiled, command = _compiled(tmp_path, kfp)
    assert wheelhouse.install_commands(compiled) == [command]  # two executors, one script
    image = clean_task_image("http://127.0.0.1:9/simple/")  # the index's address is no part of the key
    key = launcher.install_key(image, command)
    kept = Path(image["installs"]) / key
    try:
        assert wheelhouse.warm_installs(compiled) == [key]
        assert list(kept.glob("kfp-*.dist-info")) and not list(kept.glob("*.pth"))  # the layer's link to the image is not kept
        layer = launcher.make_layer(image, command, into=tmp_path)
        assert layer.cached == kept
        assert wheelhouse.warm_installs(compiled) == []  # kept: not run again
    finally:
        shutil.rmtree(kept, ignore_errors=True)
