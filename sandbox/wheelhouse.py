"""The sandbox's package index: what a disconnected RHOAI cluster's pipeline tasks install
from (a PyPI mirror their image's pip is pointed at, or the compiled `--pip-index-url`).

A wheelhouse is downloaded once, at set-up (`make venv` runs `python -m kfp_ray_sandbox.wheelhouse`):
every requirement a compiled component's `pip install` names (read from compiled/), pinned by
constraints.txt, plus kfp itself without its dependencies (as KFP's `--no-deps` line installs
it). It is laid out as a PEP 503 simple index (`simple/<project>/`, sha256 fragments) and each
sandbox serves it over HTTP on loopback: `info["pip_index"]`. The clean task pods' pip reads
only that index (launcher.py), so a package a task imports but does not declare is missing,
as on the cluster."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shlex
import subprocess
import sys
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(sys.prefix) / "wheelhouse"  # beside the venv it was built for: `make clean` removes both
STAMP = "wheelhouse.json"
_PIP_LINE = re.compile(r"pip install --quiet --no-warn-script-location (.*?)(?:&&|$)", re.M)


class MissingWheelhouse(RuntimeError):
    pass


def _executor_commands(compiled: Path):
    """The command of every executor in the compiled YAML files."""
    import yaml

    for path in sorted(compiled.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for executor in (((doc or {}).get("deploymentSpec") or {}).get("executors") or {}).values():
                yield (executor.get("container") or {}).get("command") or []


def _install_lines(compiled: Path):
    """The `pip install` arguments of every executor's command in the compiled YAML files."""
    for command in _executor_commands(compiled):
        for part in command:
            yield from _PIP_LINE.findall(part)


def install_commands(compiled: Path) -> list[list[str]]:
    """Each distinct command of the compiled executors that pip-installs (KFP's `sh -c` preamble)."""
    found: dict[str, list[str]] = {}
    for command in _executor_commands(compiled):
        if any("pip install" in part for part in command):
            found.setdefault(json.dumps(command), command)
    return list(found.values())


def requirements(compiled: Path) -> list[str]:
    """Every requirement the compiled components' install lines name (kfp aside), sorted."""
    found = set()
    for line in _install_lines(compiled):
        found.update(r for r in shlex.split(line) if r and not r.startswith("-") and not r.startswith("kfp=="))
    return sorted(found)


def kfp_requirement(compiled: Path) -> str:
    for line in _install_lines(compiled):
        for r in shlex.split(line):
            if r.startswith("kfp=="):
                return r
    raise ValueError(f"no kfp==... install line in {compiled}")


def build(out: Path, compiled: Path, constraints: Path) -> Path:
    """Download the wheelhouse into `out/files` (pip, with the machine's own index settings)
    and write its PEP 503 index; skipped when `out` already holds the same requirements."""
    reqs, kfp = requirements(compiled), kfp_requirement(compiled)
    want = {"requirements": reqs, "kfp": kfp, "constraints": hashlib.sha256(constraints.read_bytes()).hexdigest()}
    stamp = out / STAMP
    if stamp.exists() and json.loads(stamp.read_text()).get("wanted") == want:
        return out
    files = out / "files"
    files.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(files)]
    subprocess.run([*pip, "-c", str(constraints), *reqs], check=True, timeout=1800)
    subprocess.run([*pip, "--no-deps", kfp], check=True, timeout=600)
    write_index(out)
    identity = hashlib.sha256("\n".join(sorted(p.name for p in files.iterdir())).encode()).hexdigest()[:16]
    stamp.write_text(json.dumps({"wanted": want, "identity": identity}, indent=1) + "\n")
    return out


def project_of(filename: str) -> str:
    """PEP 503's normalized project name of a wheel or sdist file."""
    if filename.endswith(".whl"):
        name = filename.split("-", 1)[0]
    else:
        name = re.sub(r"\.(tar\.gz|zip)$", "", filename).rsplit("-", 1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def write_index(out: Path) -> None:
    projects: dict[str, list[Path]] = {}
    for f in sorted((out / "files").iterdir()):
        if f.suffix in (".whl", ".gz", ".zip"):
            projects.setdefault(project_of(f.name), []).append(f)
    simple = out / "simple"
    for name, dists in projects.items():
        (simple / name).mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../files/{html.escape(f.name)}#sha256={hashlib.sha256(f.read_bytes()).hexdigest()}">'
                        f"{html.escape(f.name)}</a><br>\n" for f in dists)
        (simple / name / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    listing = "".join(f'<a href="{n}/">{n}</a><br>\n' for n in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{listing}</body></html>\n")


def identity(root: Path = ROOT) -> str:
    """The wheelhouse's content id (a clean layer built from it is reused only with it)."""
    stamp = root / STAMP
    if not stamp.exists():
        raise MissingWheelhouse(f"no wheelhouse at {root}: the clean task pods install from it. Build it with "
                                "`make venv` (python -m kfp_ray_sandbox.wheelhouse)")
    return json.loads(stamp.read_text())["identity"]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # pip's requests are not the sandbox's log
        pass

    def do_GET(self) -> None:
        self.server.served += 1
        super().do_GET()


class IndexServer:
    """The wheelhouse over HTTP on loopback (the standard library's file server)."""

    def __init__(self, root: Path = ROOT):
        self.root = root  # with no wheelhouse built, it serves nothing and clean pods fail naming the fix
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
        self.httpd.daemon_threads = True
        self.httpd.served = 0  # requests answered (a test asks whether pip came here)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                       name="pip-index", daemon=True)

    @property
    def served(self) -> int:
        return self.httpd.served

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/simple/"

    def start(self) -> IndexServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def warm_installs(compiled: Path, jobs: int = 2) -> list[str]:
    """Run every compiled install script once, in a clean task layer against the served index,
    and keep each install (launcher.keep_installs): a node's image cache, filled at set-up
    rather than by whichever pods of the suite's first runs race to fill it at once. The pods
    still run their pip, which finds the packages satisfied. Returns the keys installed now."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    from .container import base_env
    from .pipelines_api import launcher
    from .rayimage import clean_task_image

    server = IndexServer().start()
    try:
        image = clean_task_image(server.url)
        todo = {}
        for command in install_commands(compiled):
            key = launcher.install_key(image, command)
            if key and not (Path(image["installs"]) / key).is_dir():
                todo.setdefault(key, command)

        def install(command: list[str]) -> None:
            with tempfile.TemporaryDirectory(prefix="kfp-ray-warm-") as tmp:
                layer = launcher.make_layer(image, command, into=Path(tmp))
                env = layer.environ(base_env(tmp))  # a pod's environment: none of this machine's PIP_* settings
                # the install script alone: its `"$0" "$@"` runs `true`
                subprocess.run([*command[:3], "true"], env=env, cwd=tmp, check=True, timeout=1800)
                launcher.keep_installs(image, layer)

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            list(pool.map(install, todo.values()))
        return sorted(todo)
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m kfp_ray_sandbox.wheelhouse", description=__doc__.split("\n\n")[0])
    p.add_argument("--compiled", type=Path, default=Path("compiled"), help="the compiled pipelines and components")
    p.add_argument("--constraints", type=Path, default=Path("constraints.txt"))
    p.add_argument("--out", type=Path, default=ROOT)
    p.add_argument("--warm", action="store_true", help="also run each compiled install script once and keep its install")
    args = p.parse_args(argv)
    if args.warm:
        # now rather than after the download: at set-up a pip may be installing into this venv
        # meanwhile (Makefile), and these need nothing it installs
        from . import container, rayimage  # noqa: F401
        from .pipelines_api import launcher  # noqa: F401
    out = build(args.out, args.compiled, args.constraints)
    print(f"wheelhouse: {len(list((out / 'files').iterdir()))} files in {out} (index {out / 'simple'})")
    if args.warm:
        if out.resolve() != ROOT.resolve():
            p.error("--warm needs the venv's own wheelhouse (--out as default): the clean task pods install from it")
        warmed = warm_installs(args.compiled)
        print(f"wheelhouse: {len(warmed)} install scripts run and kept for the clean task pods")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
