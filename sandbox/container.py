"""A container that is not a Ray node (a pipeline task's pod): its command as a process of the
sandbox's kubelet, with what a container has in a pod.

- its env (the kubelet resolves env, envFrom and secretKeyRef before: kubelet.container_env);
- the pod's service account at the in-cluster path /var/run/secrets/kubernetes.io/serviceaccount
  (token, ca.crt, namespace), and KUBERNETES_SERVICE_HOST/PORT naming the sandbox's API;
- cluster DNS for the names of Services: an /etc/hosts of its own that maps
  `<svc>.<ns>.svc`, `<svc>.<ns>.svc.cluster.local` (and, in its namespace, `<svc>`) to each
  clusterIP that existed when it started (the kubelet writes it; later Services do not resolve
  in it, README "Where the sandbox differs");
- its own /s3, /minio and /gcs (where KFP's executor reads and writes artifacts: kfp
  dsl/types/artifact_types.py maps s3://b/k to /s3/b/k), its own /tmp/kfp and
  /tmp/kfp_outputs (the KFP launcher's output files), empty at start, and its own temp
  dir as TMPDIR and HOME;
- none of this machine's files that a container's image would not have: an empty tmpfs covers
  /tmp, the directory the checkout sits in and the machine's HOME (`hidden_paths`), keeping
  only the image (the venv the sandbox's images live in, the base interpreter, the sandbox's
  own launcher) and the pod's temp dir. So a host path given as a task's input (a working_dir)
  fails in the pod as it fails on a cluster, and a task cannot read the checkout's code.
The paths are bind mounts in a private mount namespace (`unshare --mount`, root only, as the
sandbox's Ray workers get theirs): other processes on the machine never see them. Making them
leaves empty directories of those names on the machine (mount points), the one trace of a pod.
Without private mounts the pod cannot have them and does not start (the kubelet says why).

A PodProcess like RayNode (raynode.py): a record under the kubelet's root names its process
group and temp dir, so the sandbox's watchdog reaps both if the sandbox's owner dies; SIGTERM
goes to the main process, SIGKILL to the group at the end of the grace period (stop_container).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from .raynode import PodProcess, private_mounts_available, stop_container

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ARTIFACT_MOUNTS = ("/s3", "/minio", "/gcs")
# the KFP launcher's fixed paths for output parameters and the executor's output metadata
LAUNCHER_MOUNTS = ("/tmp/kfp", "/tmp/kfp_outputs")

SYSTEM_DIRS = ("/", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/dev", "/proc", "/sys", "/run", "/var", "/opt")


def hidden_paths() -> list[str]:
    """The machine's directories a pod must not see: /tmp, the directory that holds the checkout
    (its siblings too: ../shared), the machine's HOME; none inside another, no system directory."""
    checkout = Path(__file__).resolve().parents[1]
    found = ["/tmp", str(checkout.parent), os.path.expanduser("~")]
    found = [p for p in dict.fromkeys(os.path.realpath(p) for p in found) if p not in SYSTEM_DIRS]
    return [p for p in found if not any(p != q and Path(p).is_relative_to(q) for q in found)]


def kept_paths() -> list[str]:
    """What a pod's image is made of here: the venv (the sandbox's images and its launcher's
    Python live in it), the base interpreter, the sandbox's own source (its launcher), and the
    interpreters of its images of other Pythons (rayimage.foreign_python: venvs of, say, a
    pyenv python3.12 under HOME)."""
    from . import rayimage

    keep = [sys.prefix, sys.base_prefix, Path(__file__).resolve().parent, *rayimage.interpreter_prefixes()]
    return list(dict.fromkeys(os.path.realpath(p) for p in keep))


def mount_script(root: Path, mounts: list[str], hide: list[str], keep: list[str], hosts: bool) -> str:
    """The shell run in the pod's new mount namespace before its command: each hidden path
    becomes a fresh tmpfs holding only the kept paths under it (staged in the pod's temp dir,
    then moved over it, as switch_root moves a new root), then the pod's own paths are bound."""
    q = shlex.quote
    lines = ["set -e"]
    for i, path in enumerate(hide):
        stage = f"{root}/.hide{i}"
        lines += [f"mkdir -p {q(stage)}",
                  f"mount -t tmpfs -o mode={'1777' if path == '/tmp' else '755'} tmpfs {q(stage)}"]
        for kept in [str(root), *keep]:
            if kept != path and Path(kept).is_relative_to(path):
                at = f"{stage}/{Path(kept).relative_to(path)}"
                lines += [f"mkdir -p {q(at)}", f"mount --bind {q(kept)} {q(at)}"]
        lines.append(f"mount --move {q(stage)} {q(path)}")
    for target in mounts:
        lines += [f"mkdir -p {q(target)}", f"mount --bind {q(str(root) + target)} {q(target)}"]
    if hosts:
        lines.append(f"mount --bind {q(str(root / 'hosts'))} /etc/hosts")
    return "\n".join([*lines, 'exec "$@"', ""])


def base_env(tmp: str) -> dict[str, str]:
    """What every container's process has before its own env: the machine's PATH, and its own
    temp dir as HOME and TMPDIR (none of this machine's other settings, PIP_* included)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp, "TMPDIR": tmp}


class ContainerProcess(PodProcess):
    def __init__(self, name: str, root: Path, command: list[str], env: dict[str, str], *,
                 service_account: dict[str, bytes] | None = None, workdir: str = "", hosts: str = ""):
        """`service_account`: file name -> content (token, ca.crt, namespace), or None for a pod
        that does not mount one (automountServiceAccountToken: false). `hosts`: its /etc/hosts."""
        self.name = name
        self.command_line = list(command)
        self.env = dict(env)
        self.workdir = workdir
        self.log_path = root / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        root.mkdir(parents=True, exist_ok=True)
        self.temp_dir = Path("/tmp") / f"kc-{secrets.token_hex(5)}"
        self.pid_file = root / f"{name}.{self.temp_dir.name}.pid"
        self._record()  # recorded before it exists: no owner death leaves it unrecorded
        self.temp_dir.mkdir(mode=0o700)
        self.mounts = [*ARTIFACT_MOUNTS, *LAUNCHER_MOUNTS]
        for target in [*self.mounts, "/tmp"]:
            (self.temp_dir / target.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (self.temp_dir / "tmp").chmod(0o1777)
        if hosts:
            (self.temp_dir / "hosts").write_text(hosts)
        if service_account is not None:
            sa = self.temp_dir / SA_PATH.lstrip("/")
            sa.mkdir(parents=True)
            for file, content in service_account.items():
                (sa / file).write_bytes(content)
            self.mounts.insert(0, SA_PATH)

    def command(self) -> list[str]:
        if not private_mounts_available():
            raise OSError("the sandbox cannot make private mount namespaces (needs root and unshare): "
                          "a pipeline task's pod needs its own /s3 and service account paths")
        script = mount_script(self.temp_dir, self.mounts, hidden_paths(), kept_paths(), (self.temp_dir / "hosts").exists())
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *self.command_line]

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            tmp = str(self.temp_dir / "tmp")
            env = {**base_env(tmp), **self.env}
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, cwd=self.workdir or str(self.temp_dir / "tmp"))
        self._record(pgid=self.proc.pid)

    # --- what the kubelet asks of a container beyond PodProcess -------------------------
    def ready(self) -> bool:
        return self.alive()

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL to what is left after `grace`; remove its files."""
        if self.proc is not None:
            stop_container(self.proc, self.pids(), grace)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        self.pid_file.unlink(missing_ok=True)
