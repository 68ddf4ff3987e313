"""Compile every pipeline into compiled/<name>.yaml, reproducibly, and check freshness."""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import registry


def compile_one(pipeline, path: Path) -> bytes:
    from kfp import compiler

    compiler.Compiler().compile(pipeline, str(path))
    return path.read_bytes()


def compile_all(out_dir: Path = registry.COMPILED, names=None, loader=registry.load) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or registry.PIPELINES:
        path = out_dir / f"{name}.yaml"
        compile_one(loader(name), path)
        written.append(path)
    return written


def stale(compiled_dir: Path = registry.COMPILED, names=None, loader=registry.load) -> list[str]:
    """Names whose compiled YAML differs from what their source compiles to now."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names or registry.PIPELINES:
            fresh = compile_one(loader(name), Path(tmp) / f"{name}.yaml")
            current = compiled_dir / f"{name}.yaml"
            if not current.exists() or current.read_bytes() != fresh:
                out.append(name)
    return out
