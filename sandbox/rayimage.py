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

Images of another Python (image_python: the `-py312` of a tag, or the digest the CodeFlare SDK
names for it) run in an image of that Python (foreign_python): a virtualenv of that interpreter
(found on PATH or under pyenv) with the same Ray, `ray[data,default]` pinned to the project
venv's versions (pip, from the package index, once per machine), plus this image's raypip and
imagehooks. So the `ray` CLI, a job's `python` and a Ray client's version check are that
image's. Where no such interpreter is, or the install fails, the closest whole image runs
instead (the sandbox's own, logged; docs/sandbox.md), never half of one.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import logging
import os
import re
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
RAYZYGOTE = Path(__file__).resolve().parent / "rayzygote.py"  # likewise (imagehooks imports it)


def _key(site: Path, entries: list[str]) -> str:
    h = hashlib.sha256(f"{sys.version}\n{site}\n".encode())
    h.update("\n".join(entries).encode())
    for hook in (RAYPIP, IMAGEHOOKS, RAYZYGOTE):
        h.update(hook.read_bytes())
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
    _finish_image(tmp, root)
    _into_place(tmp, root)


def _finish_image(tmp: Path, root: Path) -> None:
    """The sandbox's hooks in an image built at `tmp` that will live at `root`."""
    venv_site = next((tmp / "lib").glob("python*/site-packages"))
    # each job's runtime_env pip requirements installed once per image where the suite asks (raypip.py);
    # beside the image, not in it: Ray copies the image into every job's virtualenv
    shutil.copyfile(RAYPIP, venv_site / "kfp_ray_sandbox_raypip.py")
    (venv_site / "kfp_ray_sandbox_raypip.pth").write_text(
        f"import kfp_ray_sandbox_raypip; kfp_ray_sandbox_raypip.install({str(pip_envs(root))!r})\n")
    # what the sandbox changes in Ray's processes (imagehooks.py says what and why)
    shutil.copyfile(IMAGEHOOKS, venv_site / "kfp_ray_sandbox_imagehooks.py")
    shutil.copyfile(RAYZYGOTE, venv_site / "kfp_ray_sandbox_rayzygote.py")
    (venv_site / "kfp_ray_sandbox_imagehooks.pth").write_text("import kfp_ray_sandbox_imagehooks; "
                                                            "kfp_ray_sandbox_imagehooks.install()\n")
    # venv (and pip) write their own path into pyvenv.cfg and the bin/ scripts: make them name root
    for f in [tmp / "pyvenv.cfg", *(tmp / "bin").iterdir()]:
        if f.is_file() and not f.is_symlink():
            try:
                f.write_text(f.read_text().replace(str(tmp), str(root)))
            except UnicodeDecodeError:
                continue


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
    """The image a task's pod runs when its image is the project's own (built with kfp-ray's
    stack, `compile --image`): the base interpreter and a directory of links to every package
    of the project's venv (the pod's launcher puts a writable layer over it), and a copy of the
    runtime library kfp_ray, as the Containerfile COPYs it (an `--image` component embeds none).
    Editable installs (.pth files) are left out: a pod cannot see the checkout they point to."""
    site = _site_packages()
    entries = sorted(e.name for e in site.iterdir() if not e.name.endswith(".pth") and e.name != "__pycache__")
    extra = {} if "kfp_ray" in entries else {"kfp_ray": _runtime_copy()}
    return {"python": sys._base_executable, "packages": str(_linked("task", site, entries, extra))}


def _runtime_copy() -> Path:
    """kfp_ray's source copied beside the images, once per content (the Containerfile's COPY)."""
    import importlib.util

    src = Path(importlib.util.find_spec("kfp_ray").submodule_search_locations[0])
    files = sorted(f for f in src.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(src)}\n".encode() + f.read_bytes())
    root = Path(sys.prefix) / ".kfp-ray-sandbox-image" / f"runtime-{h.hexdigest()[:16]}"
    with _BUILDING:
        if not root.exists():
            tmp = _aside(root)
            shutil.copytree(src, tmp / "kfp_ray", ignore=shutil.ignore_patterns("__pycache__"))
            _into_place(tmp, root)
    return root / "kfp_ray"


def clean_task_image(pip_index: str) -> dict:
    """A plain Python base image (ubi9/python-311, python:3.x): the interpreter and pip, nothing
    else; its pip's only index is `pip_index` (the sandbox's, wheelhouse.py). `installs`: where
    a pod leaves what its install script installed for the next pod with the same script."""
    from .wheelhouse import identity

    site = _site_packages()
    entries = sorted(e.name for e in site.iterdir() if e.name == "pip" or re.match(r"pip-[\d.]+\.dist-info$", e.name))
    return {"python": sys._base_executable, "packages": str(_linked("clean", site, entries)), "pip_index": pip_index,
            "wheelhouse": identity(), "installs": str(Path(sys.prefix) / ".kfp-ray-sandbox-image" / "installs")}


def _linked(kind: str, site: Path, entries: list[str], extra: dict[str, Path] | None = None) -> Path:
    """A directory of links to `entries` of `site` (and to each of `extra`'s paths under its
    name), made once."""
    extra = extra or {}
    links = {name: site / name for name in entries} | extra
    key = _key(site, entries + [f"{n}={p}" for n, p in sorted(extra.items())])
    root = Path(sys.prefix) / ".kfp-ray-sandbox-image" / f"{kind}-{key}"
    with _BUILDING:
        if not root.exists():
            tmp = _aside(root)
            tmp.mkdir(parents=True)
            for name, target in links.items():
                (tmp / name).symlink_to(target)
            _into_place(tmp, root)
    return root


def interpreter_prefixes() -> list[Path]:
    """The prefixes of the base interpreters of the images built so far (each image is a venv
    whose pyvenv.cfg names its interpreter's bin as `home`): what an image's processes run."""
    found = []
    for cfg in (Path(sys.prefix) / ".kfp-ray-sandbox-image").glob("*/pyvenv.cfg"):
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                found.append(Path(value.strip()).parent)
    return found


def pip_envs(root: Path) -> Path:
    return root.with_name(f"{root.name}-pip-envs")


def bin_dir(image: str | None = None) -> str:
    return str(Path(python_for(image)).parent)


def with_ray_cli(image: str | None = None) -> str:
    """The image's bin directory, with the `ray` command RHOAI's image has on its PATH (the
    console script of ray's entry point ray.scripts.scripts:main), made on first use."""
    py = Path(python_for(image))
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


# --- images of another Python -----------------------------------------------------------
log = logging.getLogger("sandbox")
# The digests the CodeFlare SDK 0.34 names (codeflare_sdk/common/utils/constants.py): Ray 2.52.1,
# py311-cu121 and py312-cu128. Tags say their Python themselves (2.52.1-py312-cu128, -rocm62, ...).
SDK_DIGESTS = {
    "sha256:595b3acd10244e33fca1ed5469dccb08df66f470df55ae196f80e56edf35ad5a": "3.11",
    "sha256:6b135421b6e756593a58b4df6664f82fc4b55237ca81475f2867518f15fe6d84": "3.12",
}
_PY_TAG = re.compile(r"(?:^|[-_.])py3(\d{1,2})(?:$|[-_.])")
FOREIGN_PACKAGES = ("ray[data,default]",)  # what the project venv has of Ray (codeflare-sdk's), numpy with it


def own_minor() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def image_python(image: str) -> str | None:
    """The Python minor a Ray image ships ("3.12"), from its tag or a known digest; None: unknown."""
    image = image or ""
    if "@" in image and image.split("@", 1)[1] in SDK_DIGESTS:
        return SDK_DIGESTS[image.split("@", 1)[1]]
    tag = image.split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    m = _PY_TAG.search(tag)
    return f"3.{m.group(1)}" if m else None


def python_for(image: str | None) -> str:
    """The python of the image `image` runs in: its own Python's image, else the sandbox's."""
    minor = image_python(image) if image else None
    if minor is None or minor == own_minor():
        return python()
    foreign = foreign_python(minor)
    return foreign if foreign is not None else python()


@functools.cache
def interpreter(minor: str) -> str | None:
    """A python`minor` on this machine: on PATH, else under pyenv (whose shim on PATH may name a
    version it does not select)."""
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [shutil.which(f"python{minor}"), *sorted(glob.glob(f"{pyenv}/versions/{minor}.*/bin/python{minor}"),
                                                          reverse=True)]
    for found in filter(None, candidates):
        try:
            out = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                                 timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return None


def _pins() -> list[str]:
    """The project venv's versions, which the foreign image's Ray and its requirements take: what
    is installed in its site-packages, never the project's own editable installs, nor an
    egg-info that a process started in the repository's root sees through its sys.path (the
    image's key would then differ by working directory, and the suite built it twice)."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    return sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions(path=[str(site)])
                   if d.metadata["Name"] and not (d.read_text("direct_url.json") or "").count('"editable": true')})


@functools.cache
def foreign_python(minor: str) -> str | None:
    """The image of Python `minor` (built on first use, then reused); None when it cannot be had."""
    interp = interpreter(minor)
    if interp is None:
        log.warning("no python%s on this machine: images of Python %s run the sandbox's Python %s image",
                    minor, minor, own_minor())
        return None
    pins = _pins()
    h = hashlib.sha256(f"{interp}\n{FOREIGN_PACKAGES}\n".encode())
    h.update("\n".join(pins).encode())
    for hook in (RAYPIP, IMAGEHOOKS, RAYZYGOTE):
        h.update(hook.read_bytes())
    root = Path(sys.prefix) / ".kfp-ray-sandbox-image" / f"py{minor.replace('.', '')}-{h.hexdigest()[:16]}"
    py = root / "bin" / "python"
    with _BUILDING, _machine_lock(root):  # xdist workers wait for one build rather than race two
        if not py.exists():
            try:
                _build_foreign(interp, pins, root)
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("cannot build the Python %s Ray image (%s): images of Python %s run the sandbox's "
                            "Python %s image", minor, exc, minor, own_minor())
                return None
    return str(py)


@contextlib.contextmanager
def _machine_lock(root: Path):
    """An exclusive lock beside `root`, across processes; the kernel drops it if its holder dies."""
    import fcntl

    root.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(f"{root}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _build_foreign(interp: str, pins: list[str], root: Path) -> None:
    tmp = _aside(root)
    try:
        subprocess.run([interp, "-m", "venv", str(tmp)], check=True, capture_output=True, timeout=300)
        constraints = tmp / "constraints.txt"
        constraints.write_text("\n".join(pins) + "\n")
        subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "-c", str(constraints), *FOREIGN_PACKAGES, "numpy"],
                       check=True, capture_output=True, timeout=1200)
        _finish_image(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _into_place(tmp, root)
