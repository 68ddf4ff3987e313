"""A disk cache of the slim runtimes (components/_slim.py), shared by every process on the machine.

Stripping the runtime for one component costs ~0.5 s of CPU, and every process that imports a
pipeline builds all of its components: each `kfp-ray run --local`, each compile, each run of
the test suite's. An entry is keyed by everything its text depends on: the component
function's source, every runtime module's text, the stripper's own source and the Python
version (ast.unparse's output differs between them). So an entry is never stale: a changed
input is another key. Writes are atomic (another process may read the same key at once);
the oldest entries beyond MAX_ENTRIES go on each write. KFP_RAY_CACHE_DIR moves the cache;
KFP_RAY_CACHE_DIR=off turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "KFP_RAY_CACHE_DIR"
MAX_ENTRIES = 64  # a compile of every pipeline writes ~10; the rest are older sources'


def cache_dir() -> Path | None:
    """Where entries live: KFP_RAY_CACHE_DIR, else $XDG_CACHE_HOME/kfp-ray/slim (~/.cache);
    None when turned off."""
    given = os.environ.get(CACHE_ENV, "")
    if given == "off":
        return None
    if given:
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfp-ray" / "slim"


def key(func_source: str, source_dir: Path) -> str:
    h = hashlib.sha256()
    for part in (sys.version, Path(__file__).with_name("_slim.py").read_text(), func_source):
        h.update(part.encode() + b"\0")
    for path in sorted(source_dir.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def cached(func_source: str, source_dir: Path, build: Callable[[], dict[str, str]]) -> dict[str, str]:
    """build()'s files for this function and runtime, from the cache when an entry exists.
    A cache that cannot be read or written is skipped: it only saves time."""
    folder = cache_dir()
    if folder is None:
        return build()
    entry = folder / f"{key(func_source, source_dir)}.json"
    try:
        return json.loads(entry.read_text())
    except (OSError, ValueError):
        pass
    files = build()
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(files, f, sort_keys=True)
        os.replace(tmp, entry)
        _prune(folder)
    except OSError:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
    return files


def _prune(folder: Path) -> None:
    """The newest MAX_ENTRIES entries stay, and the half-written files of processes killed
    mid-write (an hour old) go."""
    entries, now = [], time.time()
    for p in folder.iterdir():
        try:
            mtime = p.stat().st_mtime
        except OSError:  # another process pruned it
            continue
        if p.suffix == ".json":
            entries.append((mtime, p))
        elif p.suffix == ".tmp" and now - mtime > 3600:
            p.unlink(missing_ok=True)
    for _, p in sorted(entries, reverse=True)[MAX_ENTRIES:]:
        p.unlink(missing_ok=True)
