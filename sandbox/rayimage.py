"""The sandbox's Ray image: the Python every sandbox Ray node (and so every job) runs.

RHOAI's Ray image ships Ray and numpy, not the libraries a training job imports (its Pipfile:
ray[all] and numpy; quay.io/modh/ray:2.52.1-py311-cu121 has no torch, xgboost, scikit-learn,
boto3 or s3fs). Running the nodes from the project's virtualenv, which has them, let a job
that forgot its requirements pass here and fail there. So nodes run from a virtualenv that
has what the project's has, less NOT_IN_RAY_IMAGE: a job gets those only through runtime_env
pip, as on RHOAI.

Cheap to build and to clone: the image is a venv of the base interpreter whose only
site-packages entry is a .pth naming a directory of symlinks to the project venv's packages.
Ray's pip plugin clones the node's venv for a job (copying that one .pth) and pip-installs the
requirements into the clone, where they come before the symlinked packages on sys.path. pip
never uninstalls through the symlinks: they lie outside the clone ("outside environment").
Differences from RHOAI (README, "Where the sandbox differs"): the image is the project's
Python and package versions, not the RHOAI image's.
"""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig
import threading
from importlib import metadata
from pathlib import Path

# Distributions the RHOAI Ray image lacks that the project's venv has (or a job may import).
NOT_IN_RAY_IMAGE = ("torch", "torchvision", "xgboost", "xgboost-cpu", "scikit-learn", "boto3", "botocore",
                    "s3transfer", "s3fs")


def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _excluded(site: Path) -> set[str]:
    """Top-level site-packages entries that belong to NOT_IN_RAY_IMAGE."""
    out = set()
    for name in NOT_IN_RAY_IMAGE:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or []:
            top = f.parts[0] if f.parts else ""
            if top and top != ".." and (site / top).exists():
                out.add(top)
    return out


RAYPIP = Path(__file__).resolve().parent / "raypip.py"  # copied into the image (its docstring says why)
IMAGEHOOKS = Path(__file__).resolve().parent / "imagehooks.py"  # likewise


def _key(site: Path, entries: list[str]) -> str:
    h = hashlib.sha256(f"{sys.version}\n{site}\n".encode())
    h.update("\n".join(entries).encode())
    h.update(RAYPIP.read_bytes())
    h.update(IMAGEHOOKS.read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def python() -> str:
    """The image's python (built on first use, then reused while the project venv is unchanged)."""
    site = _site_packages()
    excluded = _excluded(site)
    entries = sorted(e.name for e in site.iterdir()
                     if e.name not in excluded and not e.name.endswith(".pth") and e.name != "__pycache__")
    root = Path(sys.prefix) / ".kfp-ray-sandbox-image" / _key(site, entries)
    py = root / "bin" / "python"
    with _BUILDING:
        if not py.exists():
            _build_python(site, entries, root)
    return str(py)


def _build_python(site: Path, entries: list[str], root: Path) -> None:
    tmp = _aside(root)
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(tmp)], check=True, capture_output=True)
    (tmp / "packages").mkdir()
    for name in entries:
        (tmp / "packages" / name).symlink_to(site / name)
    venv_site = next((tmp / "lib").glob("python*/site-packages"))
    (venv_site / "kfp_ray_sandbox_image.pth").write_text(f"{root / 'packages'}\n")
    # each job's runtime_env pip requirements installed once per image, not per node (raypip.py);
    # beside the image, not in it: Ray copies the image into every job's virtualenv
    shutil.copyfile(RAYPIP, venv_site / "kfp_ray_sandbox_raypip.py")
    (venv_site / "kfp_ray_sandbox_raypip.pth").write_text(
        f"import kfp_ray_sandbox_raypip; kfp_ray_sandbox_raypip.install({str(pip_envs(root))!r})\n")
    # what the sandbox changes in Ray's processes (imagehooks.py says what and why)
    shutil.copyfile(IMAGEHOOKS, venv_site / "kfp_ray_sandbox_imagehooks.py")
    (venv_site / "kfp_ray_sandbox_imagehooks.pth").write_text("import kfp_ray_sandbox_imagehooks; "
                                                            "kfp_ray_sandbox_imagehooks.install()\n")
    # venv writes its own path into pyvenv.cfg and the bin/ scripts: make them name root
    for f in [tmp / "pyvenv.cfg", *(tmp / "bin").iterdir()]:
        if f.is_file() and not f.is_symlink():
            try:
                f.write_text(f.read_text().replace(str(tmp), str(root)))
            except UnicodeDecodeError:
                continue
    _into_place(tmp, root)


def _aside(root: Path) -> Path:
    """Where to build `root`: beside it under a name no other builder uses, then renamed into
    place (xdist workers, and a sandbox's tasks starting together, race to build it)."""
    return root.with_name(f"{root.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _into_place(tmp: Path, root: Path) -> None:
    try:
        os.rename(tmp, root)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)


_BUILDING = threading.Lock()  # one build per process at a time: functools.cache does not serialize first calls


@functools.cache
def task_image() -> dict:
    """The image a pipeline task's pod runs: the base interpreter and a directory of links to
    every package of the project's venv (the pod's launcher puts a writable layer over it).
    The compiled YAML names a plain Python image and pip-installs its packages first; here
    those packages are present, so the installs find them and download nothing (README,
    "Where the sandbox differs"). Editable installs (.pth files) are left out: a task gets
    kfp_ray from the code its component embeds, as on RHOAI."""
    site = _site_packages()
    entries = sorted(e.name for e in site.iterdir() if not e.name.endswith(".pth") and e.name != "__pycache__")
    root = Path(sys.prefix) / ".kfp-ray-sandbox-image" / f"task-{_key(site, entries)}"
    with _BUILDING:
        if not root.exists():
            tmp = _aside(root)
            tmp.mkdir(parents=True)
            for name in entries:
                (tmp / name).symlink_to(site / name)
            _into_place(tmp, root)
    return {"python": sys._base_executable, "packages": str(root)}


def pip_envs(root: Path) -> Path:
    return root.with_name(f"{root.name}-pip-envs")


def bin_dir() -> str:
    return str(Path(python()).parent)


def with_ray_cli() -> str:
    """The image's bin directory, with the `ray` command RHOAI's image has on its PATH (the
    console script of ray's entry point ray.scripts.scripts:main), made on first use."""
    py = Path(python())
    cli = py.parent / "ray"
    if not cli.exists():
        tmp = _aside(cli)
        tmp.write_text(f"#!{py}\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n")
        tmp.chmod(0o755)
        tmp.replace(cli)
    return str(py.parent)


def is_ray_image(image: str) -> bool:
    """Whether a container's image stands for a Ray image (quay.io/modh/ray:..., rayproject/ray...,
    .../ray-...): its repository's last path component is `ray` or starts with `ray-`."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1].split(":", 1)[0]
    return last == "ray" or last.startswith("ray-")
