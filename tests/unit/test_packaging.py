"""What `pip install kfp-ray` puts in a user's environment: one import namespace, kfp_ray (the
runtime library, kfp_ray.components, kfp_ray.pipelines), nothing else top level; the sandbox
is its own distribution (kfp-ray-sandbox, import name kfp_ray_sandbox), installed only with
the `sandbox` extra. Built from this checkout as pip builds it, then used from the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    # built from a copy: an in-tree build leaves build/ folders in the checkout
    source = tmp_path_factory.mktemp("source") / "kfp-ray"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info",
                                                                  "__pycache__", ".pytest_cache", ".ruff_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(source), str(source / "sandbox")], check=True, capture_output=True, timeout=300)
    return {w.name.split("-")[0]: w for w in out.glob("*.whl")}


def top_level(wheel: Path) -> set[str]:
    return {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}


def test_kfp_ray_installs_only_the_kfp_ray_namespace(wheels):
    assert top_level(wheels["kfp_ray"]) == {"kfp_ray", "kfp_ray-0.1.0.dist-info"}
    names = set(zipfile.ZipFile(wheels["kfp_ray"]).namelist())
    for expected in ("kfp_ray/jobs.py", "kfp_ray/components/provision_ray_cluster/component.py",
                     "kfp_ray/pipelines/xgboost_tune/pipeline.py", "kfp_ray/pipelines/jobs/xgboost_tune.py",
                     "kfp_ray/pipelines/jobs/requirements/xgboost_tune.txt"):
        assert expected in names
    assert not [n for n in names if "/tests/" in n]
    entry_points = zipfile.ZipFile(wheels["kfp_ray"]).read("kfp_ray-0.1.0.dist-info/entry_points.txt").decode()
    assert "kfp-ray = kfp_ray.pipelines.__main__:main" in entry_points


def test_the_sandbox_is_its_own_distribution_behind_an_extra(wheels):
    assert top_level(wheels["kfp_ray_sandbox"]) == {"kfp_ray_sandbox", "kfp_ray_sandbox-0.1.0.dist-info"}
    names = set(zipfile.ZipFile(wheels["kfp_ray_sandbox"]).namelist())
    assert "kfp_ray_sandbox/data/bootstrap.yaml" in names
    assert [n for n in names if n.startswith("kfp_ray_sandbox/data/crds/") and n.endswith(".json")]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if "sandbox" in d or "moto" in d]
    assert project["optional-dependencies"]["sandbox"] == ["kfp-ray-sandbox==0.1.0"]


def test_every_package_folder_is_listed():
    """A new component or pipeline folder is shipped only if pyproject.toml names it."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"kfp_ray"}
    for folder, package in (("components", "kfp_ray.components"), ("pipelines", "kfp_ray.pipelines")):
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "tests" not in parts:
                found.add(".".join((package, *parts)) if parts else package)
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
    sandbox = set(tomllib.loads((ROOT / "sandbox" / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(("kfp_ray_sandbox", *init.parent.relative_to(ROOT / "sandbox").parts))
             for init in (ROOT / "sandbox").rglob("__init__.py")}
    assert found <= sandbox, f"add to sandbox/pyproject.toml [tool.setuptools] packages: {sorted(found - sandbox)}"


def test_components_from_an_installed_wheel_compile_to_the_committed_yaml(wheels, tmp_path):
    """Installed (not editable), kfp_ray holds components/ and pipelines/ too; only the runtime
    library travels inside a component, so the YAML is byte for byte what compiled/ has."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheels["kfp_ray"])], check=True, capture_output=True, timeout=300)
    code = (
        "import sys, kfp_ray\n"
        "from kfp import compiler\n"
        "from kfp_ray.pipelines import registry\n"
        "assert kfp_ray.__file__.startswith(sys.argv[1]), kfp_ray.__file__\n"
        "from kfp_ray.components import teardown_ray_cluster\n"
        "compiler.Compiler().compile(teardown_ray_cluster, sys.argv[2])\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('components', 'pipelines', 'sandbox')]\n"
    )
    out = tmp_path / "teardown.yaml"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    subprocess.run([sys.executable, "-c", code, str(target), str(out)], check=True, env=env, cwd=tmp_path, timeout=300)
    assert out.read_bytes() == (ROOT / "compiled" / "components" / "teardown_ray_cluster.yaml").read_bytes()


def test_component_names_give_components_whatever_was_imported_first():
    code = (
        "from kfp_ray.pipelines.common import train_on_ray\n"  # imports the component modules
        "from kfp_ray.pipelines.xgboost_tune.pipeline import xgboost_tune\n"  # builds submit with its job's code
        "from kfp_ray.components import provision_ray_cluster, submit_ray_job\n"
        "from kfp_ray.components.submit_ray_job import component\n"
        "assert submit_ray_job is component.submit_ray_job, 'the name gave another build of the component'\n"
        "from kfp.dsl.python_component import PythonComponent\n"
        "assert isinstance(provision_ray_cluster, PythonComponent), type(provision_ray_cluster)\n"
        "assert isinstance(submit_ray_job, PythonComponent), type(submit_ray_job)\n"
        "import sys\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('components', 'pipelines', 'sandbox')]\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd="/", timeout=300)


def test_from_an_installed_wheel_upload_compiles_the_pipeline_and_a_bad_file_is_one_line(wheels, tmp_path):
    """An installed kfp-ray has no compiled/: `upload NAME` compiles NAME (the default build)
    then connects (no server here: one line, exit 1); a bad --file is one line, exit 2."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    str(wheels["kfp_ray"])], check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KFP_HOST", "KFP_TOKEN")}
    env |= {"PYTHONPATH": str(target), "KUBECONFIG": str(tmp_path / "none")}

    def kfp_ray(*args):
        return subprocess.run([sys.executable, "-m", "kfp_ray.pipelines", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    assert not (target / "kfp_ray" / "compiled").exists()
    r = kfp_ray("upload", "kfp_ray_gc", "--host", "https://127.0.0.1:9")
    assert "compiling kfp_ray_gc" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stderr.startswith("error: cannot reach"), r.stderr
    r = kfp_ray("submit", "--file", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot read it" in r.stderr, r.stderr
