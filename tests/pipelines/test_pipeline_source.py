"""Which compiled pipeline `upload`, `submit` and `schedule` send (pipelines/package.py): --file,
--from DIR (a `kfp-ray compile --out DIR` build), or the default build, compiled on the fly
where there is no compiled/ (kfp-ray installed from a wheel). A user's mistake is one line
and exit code 2, before any connection is tried (no server is configured here: a command
that got as far as connecting would fail otherwise, with exit code 1)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kfp_ray.pipelines import package, registry
from kfp_ray.pipelines.__main__ import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_server(monkeypatch, tmp_path):
    """No route, token or kubeconfig: connecting would fail."""
    for var in ("KFP_HOST", "KFP_TOKEN", "KFP_TOKEN_FILE", "KFP_CA_BUNDLE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


def a_build(tmp_path: Path, name: str = "kfp_ray_gc", edit=None) -> Path:
    """A build folder as `kfp-ray compile --out DIR` makes one, holding `name` (edited)."""
    docs = list(yaml.safe_load_all((ROOT / "compiled" / f"{name}.yaml").read_text()))
    if edit:
        edit(docs[0])
    folder = tmp_path / "build"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return folder


def _args(**kw):
    return argparse.Namespace(**{"name": None, "file": None, "from_dir": None, **kw})


USER_ERRORS = [
    (["upload", "--file", "{tmp}/missing.yaml"], "--file {tmp}/missing.yaml: cannot read it"),
    (["submit", "--file", "{tmp}/notes.yaml"], "not a compiled KFP pipeline"),
    (["schedule", "--every", "1h", "--file", "{tmp}/broken.yaml"], "not YAML"),
    (["upload"], "give a pipeline NAME"),
    (["submit", "mnist"], "unknown pipeline 'mnist'"),
    (["upload", "kfp_ray_gc", "--from", "{tmp}/nowhere"], "--from {tmp}/nowhere: no such folder"),
    (["submit", "xgboost_tune", "--from", "{tmp}/build"], "it has no xgboost_tune.yaml (it has: kfp_ray_gc)"),
    (["submit", "kfp_ray_gc", "--from", "{tmp}/build", "--param", "samples=3"], "kfp_ray_gc has no such parameter"),
]


@pytest.mark.parametrize("argv,said", USER_ERRORS, ids=[" ".join(a[:2]) for a, _ in USER_ERRORS])
def test_a_users_mistake_is_one_line_and_exit_2_before_connecting(tmp_path, capsys, argv, said):
    (tmp_path / "notes.yaml").write_text("shopping: [milk]\n")
    (tmp_path / "broken.yaml").write_text("a: [\n")
    a_build(tmp_path)
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and said.format(tmp=tmp_path) in err, err


def test_the_entry_point_prints_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", "upload", "xgboost_tune", "--file",
                        str(tmp_path / "missing.yaml")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_params_are_checked_against_the_file_that_is_sent(tmp_path, capsys):
    def rename_timeout(spec):  # a build whose parameters differ from the shipped pipeline's
        params = spec["root"]["inputDefinitions"]["parameters"]
        params["wait_seconds"] = params.pop("timeout")
    build = a_build(tmp_path, edit=rename_timeout)
    assert main(["submit", "--file", str(build / "kfp_ray_gc.yaml"), "--param", "timeout=10"]) == 2
    assert "kfp-ray-gc has no such parameter; it has: delete, namespace, wait_seconds" in capsys.readouterr().err
    with package.resolve(_args(file=build / "kfp_ray_gc.yaml")) as pkg:
        assert pkg.name == "kfp-ray-gc"  # no NAME: the file's pipeline name
        assert pkg.inputs()["wait_seconds"] == {"kind": "int", "default": 300.0}


def test_from_a_build_folder_sends_its_file(tmp_path):
    build = a_build(tmp_path)
    with package.resolve(_args(name="kfp_ray_gc", from_dir=build)) as pkg:
        assert pkg.path == build / "kfp_ray_gc.yaml" and pkg.name == "kfp_ray_gc"


def test_without_compiled_the_default_build_is_compiled_into_a_temp_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(registry, "COMPILED", tmp_path / "site-packages-has-no-compiled")
    with package.resolve(_args(name="kfp_ray_gc")) as pkg:
        made = pkg.path
        assert made.is_file() and not made.is_relative_to(tmp_path)
        assert pkg.spec["pipelineInfo"]["name"] == "kfp-ray-gc"
        assert set(pkg.inputs()) == {"delete", "namespace", "timeout"}
    assert not made.exists()  # removed afterwards
    assert "compiling kfp_ray_gc" in capsys.readouterr().out
