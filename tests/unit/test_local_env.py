"""The isolated env kfp.local runs in (pipelines/local.py): made once, whoever asks first."""

import subprocess
import sys
from pathlib import Path

MAKE = ("import sys; from pathlib import Path; from kfp_ray.pipelines import local; "
        "local.OVERLAY = Path(sys.argv[1]); print(local.isolated_python())")


def _ask(overlay: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", MAKE, str(overlay)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_runs_started_together_on_a_fresh_checkout_share_one_env(tmp_path):
    # the fault matrix's first rows did this on CI's fresh clone: each saw no env, and one's
    # venv.create(clear=True) wiped the env another was building, so that run died at once
    overlay = tmp_path / "venv-kfp-local"
    procs = [_ask(overlay) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-2000:] for _, err in outs]
    pythons = {out.strip() for out, _ in outs}
    assert pythons == {str(overlay / "bin" / "python")}
    check = subprocess.run([pythons.pop(), "-c", "import kfp_ray.pipelines.local, pip"], capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0, check.stderr


def test_an_env_left_half_made_is_made_again(tmp_path):
    overlay = tmp_path / "venv-kfp-local"
    (overlay / "bin").mkdir(parents=True)
    (overlay / "bin" / "python").write_text("")  # an interpreter path, but the env was never finished
    proc = _ask(overlay)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    check = subprocess.run([out.strip(), "-c", "import kfp_ray"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr
