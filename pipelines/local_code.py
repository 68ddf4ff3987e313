"""`kfp-ray run --local` with your code in a directory of this machine. A task's pod sees only
its image and S3, as on a cluster (the sandbox hides this machine's files from it), so a
`working_dir` that is a directory here is uploaded to the sandbox's S3 (the data connection's
bucket, under code/<content hash>/) and the run gets that s3:// prefix: what you would do by
hand for a run on OpenShift AI (`aws s3 sync DIR s3://BUCKET/code/`, or the MinIO console)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from .cli_args import UsageError

PARAMS = ("working_dir",)
SKIP = {"__pycache__", ".git", ".ipynb_checkpoints"}


def local_dirs(params: dict) -> dict[str, Path]:
    """The params whose value is a directory of this machine (an absolute or ~ path). Checked
    before the sandbox starts: such a path that is no directory here is refused."""
    found = {}
    for name in PARAMS:
        value = params.get(name)
        if not isinstance(value, str) or not value.startswith(("/", "~")):
            continue  # '' (none), a path inside the component's embedded code, or a URL
        path = Path(value).expanduser()
        if not path.is_dir():
            raise UsageError(f"{name}: {value!r} is not a directory on this machine; give one (run --local uploads "
                             "it to the sandbox's S3), an s3:// prefix or an https:// .zip")
        found[name] = path
    return found


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not SKIP & set(p.relative_to(root).parts))


def upload(params: dict, s3, bucket: str, echo=print) -> dict:
    """`params` with each local directory uploaded and replaced by its s3:// prefix."""
    out = dict(params)
    for name, root in local_dirs(params).items():
        paths = files(root)
        digest = hashlib.sha256()
        for p in paths:
            digest.update(f"{p.relative_to(root).as_posix()}\0{p.stat().st_size}\0".encode())
            digest.update(p.read_bytes())
        prefix = f"code/{digest.hexdigest()[:16]}/"
        for p in paths:
            s3.upload_file(str(p), bucket, prefix + p.relative_to(root).as_posix())
        out[name] = f"s3://{bucket}/{prefix}"
        size = sum(p.stat().st_size for p in paths)
        echo(f"==> {name} {root}: {len(paths)} files ({size / 1024:.0f} KiB) uploaded to {out[name]} "
             "(a task's pod sees S3, not this machine's files)")
    return out
