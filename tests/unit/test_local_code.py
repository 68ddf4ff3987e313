"""`run --local` with a working_dir of this machine: checked before the sandbox starts, uploaded
under a prefix named by its content (pipelines/local_code.py; the upload through a real run is
test_run_local's generic run)."""

from __future__ import annotations

import pytest

from pipelines import local_code
from pipelines.cli_args import UsageError


class Bucket:
    """Records upload_file as boto3's client takes it (the real S3 path: test_run_local)."""

    def __init__(self):
        self.keys = {}

    def upload_file(self, path, bucket, key):
        self.keys[key] = (bucket, open(path, "rb").read())


def test_a_path_of_this_machine_that_is_no_directory_is_refused_naming_the_field(tmp_path):
    with pytest.raises(UsageError, match=r"working_dir: '/nowhere/code' is not a directory on this machine.*s3://"):
        local_code.local_dirs({"working_dir": "/nowhere/code"})
    (tmp_path / "f.py").write_text("x")
    with pytest.raises(UsageError, match="working_dir"):
        local_code.local_dirs({"working_dir": str(tmp_path / "f.py")})


def test_urls_embedded_paths_and_none_are_left_as_given():
    params = {"working_dir": "s3://b/code/", "entrypoint": "/abs/not/a/working_dir"}
    for value in ("", "jobs", "s3://b/code/", "https://example.com/code.zip"):
        assert local_code.local_dirs({**params, "working_dir": value}) == {}
        assert local_code.upload({**params, "working_dir": value}, Bucket(), "b") == {**params, "working_dir": value}


def test_a_directory_is_uploaded_under_its_content_hash(tmp_path):
    code = tmp_path / "code"
    (code / "pkg" / "__pycache__").mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    (code / "pkg" / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"\0")
    lines, bucket = [], Bucket()
    got = local_code.upload({"working_dir": str(code), "epochs": 2}, bucket, "kfp-ray", lines.append)
    prefix = got["working_dir"].removeprefix("s3://kfp-ray/")
    assert got["epochs"] == 2 and prefix.startswith("code/") and prefix.endswith("/")
    assert bucket.keys == {prefix + "train.py": ("kfp-ray", b"print('hi')\n"), prefix + "pkg/util.py": ("kfp-ray", b"X = 1\n")}
    assert lines == [f"==> working_dir {code}: 2 files (0 KiB) uploaded to {got['working_dir']} "
                     "(a task's pod sees S3, not this machine's files)"]
    # the same content, the same prefix; a changed file, another
    assert local_code.upload({"working_dir": str(code)}, Bucket(), "kfp-ray", lines.append) == {"working_dir": got["working_dir"]}
    (code / "train.py").write_text("print('bye')\n")
    assert local_code.upload({"working_dir": str(code)}, Bucket(), "kfp-ray", lines.append)["working_dir"] != got["working_dir"]
