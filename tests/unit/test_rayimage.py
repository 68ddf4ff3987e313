"""The sandbox's Ray image is RHOAI's in what it lacks: Ray is there, the training libraries
and boto3 are not (jobs get them through runtime_env pip)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kfp_ray_sandbox import rayimage
from kfp_ray_sandbox.raynode import ray_env
from tests.opt_in import FULL


def imports(python: str, module: str) -> bool:
    """Whether `module` imports in the image, with the environment the sandbox's Ray nodes get."""
    done = subprocess.run([python, "-c", f"import {module}"], env=ray_env(), capture_output=True, timeout=120)
    return done.returncode == 0


def test_the_image_has_ray_but_not_what_the_rhoai_image_lacks():
    python = rayimage.python()
    assert imports(python, "ray") and imports(python, "numpy")
    assert [m for m in ("torch", "xgboost", "sklearn", "boto3", "kfp_ray") if imports(python, m)] == []
    assert rayimage.python() == python  # built once, then reused


# Two Ray nodes' runtime-env agents, as the sandbox's nodes run them: Ray's own pip plugin with
# a node's resources dir, in the image's Python (which wraps the plugin, sandbox/raypip.py).
NODE = r"""
import asyncio, logging, os, sys
from ray._private.runtime_env.context import RuntimeEnvContext
from ray._private.runtime_env.pip import PipPlugin
from ray.runtime_env import RuntimeEnv
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
log = logging.getLogger("node")
env = RuntimeEnv(pip={"packages": sys.argv[2:], "pip_install_options": ["--no-index", "--find-links", sys.argv[1]]})
plugin = PipPlugin(os.environ["NODE_RESOURCES"])
uri = plugin.get_uris(env)[0]
asyncio.run(plugin.create(uri, env, RuntimeEnvContext(), log))
context = RuntimeEnvContext()
plugin.modify_context([uri], env, context, log)
print("PYTHON", context.py_executable)
"""


def toy_wheel(folder) -> str:
    """A local wheel (no index needed): kfp_ray_toy 1.0, whose module says where it is."""
    src = folder / "src"
    (src / "kfp_ray_toy").mkdir(parents=True)
    (src / "kfp_ray_toy" / "__init__.py").write_text("import os\nWHERE = os.path.dirname(__file__)\n")
    (src / "pyproject.toml").write_text('[project]\nname = "kfp-ray-toy"\nversion = "1.0"\n'
                                        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n')
    wheels = folder / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(src)],
                   check=True, capture_output=True, timeout=300)
    return str(wheels)


def test_runtime_env_pip_installs_once_per_image_and_every_node_uses_it(tmp_path):
    """Two nodes asking for the same requirements at once: one installs (Ray's own code, under
    a lock), the other waits and reuses it; both run the job's Python from the shared
    environment, which has the requirement. A requirement that cannot be installed fails on
    every node, and nothing of it is kept."""
    wheels = toy_wheel(tmp_path)
    shared = tmp_path / "pip-envs"
    env = ray_env({"KFP_RAY_SANDBOX_PIP_ENVS": str(shared)})

    def node(name, *packages):
        return subprocess.Popen([rayimage.python(), "-c", NODE, wheels, *packages], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env={**env, "NODE_RESOURCES": str(tmp_path / name)})

    nodes = [node("a", "kfp-ray-toy==1.0"), node("b", "kfp-ray-toy==1.0")]
    logs = [p.communicate(timeout=300)[0] for p in nodes]
    assert [p.returncode for p in nodes] == [0, 0], logs
    assert sum("Installing python requirements" in log for log in logs) == 1, logs
    assert sum("installed by an earlier Ray node" in log for log in logs) == 1, logs
    [built] = [d for d in shared.iterdir() if d.is_dir()]
    for name, log in zip("ab", logs, strict=True):
        [target] = (tmp_path / name / "pip").iterdir()
        assert target.is_symlink() and target.resolve() == built.resolve()
        python = log.split("PYTHON ")[-1].strip()
        where = subprocess.run([python, "-c", "import kfp_ray_toy; print(kfp_ray_toy.WHERE)"], env=env,
                               capture_output=True, text=True, timeout=120)
        assert Path(where.stdout.strip()).resolve().is_relative_to(built.resolve()), where
    missing = node("c", "kfp-ray-toy==2.0")
    log = missing.communicate(timeout=300)[0]
    assert missing.returncode != 0 and "kfp-ray-toy==2.0" in log
    assert [d.name for d in shared.iterdir() if d.is_dir()] == [built.name]


# Every Ray image the CodeFlare SDK 0.34 or RHOAI's docs name, with its Python.
NAMED_IMAGES = {
    "quay.io/modh/ray@sha256:595b3acd10244e33fca1ed5469dccb08df66f470df55ae196f80e56edf35ad5a": "3.11",  # CUDA_PY311
    "quay.io/modh/ray@sha256:6b135421b6e756593a58b4df6664f82fc4b55237ca81475f2867518f15fe6d84": "3.12",  # CUDA_PY312
    "quay.io/modh/ray:2.52.1-py311-cu121": "3.11",
    "quay.io/modh/ray:2.52.1-py312-cu128": "3.12",
    "quay.io/modh/ray:2.47.1-py311-rocm62": "3.11",  # the SDK docs' ROCm image
}


def test_named_images_say_their_python():
    from codeflare_sdk.common.utils import constants

    assert {constants.CUDA_PY311_RUNTIME_IMAGE, constants.CUDA_PY312_RUNTIME_IMAGE} <= set(NAMED_IMAGES)
    assert {image: rayimage.image_python(image) for image in NAMED_IMAGES} == NAMED_IMAGES
    assert rayimage.image_python("rayproject/ray:2.52.1") is None
    assert rayimage.python_for("rayproject/ray:2.52.1") == rayimage.python_for(None) == rayimage.python()


def test_every_named_image_runs_its_python_and_its_ray_cli():
    """Each image's `ray` CLI and `python` are that image's Python (the closest whole image where
    this machine has no such interpreter: docs/sandbox.md); each distinct image is run once.
    An image of another Python this machine has (py312) is built, so checked, only with
    KFP_RAY_TEST_FULL=1."""
    checked: dict[str, str] = {}
    for image, minor in NAMED_IMAGES.items():
        if minor != rayimage.own_minor() and rayimage.interpreter(minor) and not FULL:
            continue  # its image is a pip install of Ray for that Python: minutes of CPU (KFP_RAY_TEST_FULL=1 runs it)
        bindir = rayimage.with_ray_cli(image)
        env = ray_env(image=image)
        assert env["PATH"].split(":")[0] == bindir
        expected = minor if rayimage.interpreter(minor) else rayimage.own_minor()
        if bindir in checked:
            assert checked[bindir] == expected, image
            continue
        version = subprocess.run(["python", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], env=env,
                                 capture_output=True, text=True, timeout=120)
        assert version.stdout.strip() == expected, (image, version.stderr)
        cli = subprocess.run([str(Path(bindir) / "ray"), "--version"], env=env, capture_output=True, text=True,
                             timeout=300)
        assert cli.returncode == 0 and "2.52.1" in cli.stdout, (image, cli.stderr)
        checked[bindir] = expected
    assert len(set(checked.values())) == len(checked)  # one image per Python


def test_an_image_of_another_python_has_one_key_wherever_it_is_asked_for(tmp_path):
    """Its pins (the key of the py312 image) are the venv's installs, the same from the
    repository's root, whose kfp_ray.egg-info a `python -c` there sees, as from anywhere else."""
    code = "from kfp_ray_sandbox import rayimage; print(rayimage._pins())"
    root = Path(__file__).resolve().parents[2]
    assert (root / "kfp_ray.egg-info").exists() or (root / "sandbox" / "kfp_ray_sandbox.egg-info").exists()
    seen = [subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True).stdout
            for cwd in (root, tmp_path)]
    assert seen[0] == seen[1] and "kfp-ray==" not in seen[0]
