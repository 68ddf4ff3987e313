"""rayjobs.submitted_entrypoint without Ray (issue 25 item 18; end to end:
components/run_ray_job/tests/test_entrypoint.py): the words a K8sJobMode RayJob's submitter
bash hands `ray job submit --`, joined as Ray's CLI joins them (list2cmdline) or as a plain
join would, and run by the head's `/bin/sh -c`, print what `/bin/sh -c <entrypoint>` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from subprocess import list2cmdline

import pytest

from kfp_ray.rayjobs import submitted_entrypoint
from kfp_ray_sandbox.controllers.kubelet import _expand

ENTRYPOINTS = ["python -c 'print(\"rj-ok\")'", "echo \"a  \\\"b\\\"\" 'c' $V ${V}x \"$V\"; echo $$ >/dev/null",
               "printf '%s\\n' 'a\\b' \"c\\\\d\" e\\\\f", "false || echo one && echo `echo two` $(echo three)",
               "x=1\nfor f in *.nothing; do\n  echo \"$f $x\"\ndone\n", "echo '$(V)' '$$(V)' \"\\$(V)\" $$ >/dev/null && echo done"]
JOINS = {"list2cmdline": list2cmdline, "plain": " ".join}


def words(entrypoint: str) -> list[str]:
    """The words bash gives `ray job submit --` from KubeRay's line (GetK8sJobCommand), after
    Kubernetes expanded the container's args ($(VAR), $$)."""
    line = _expand(f"{sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' -- {entrypoint} ; true",
                   {"V": "submitter"})
    out = subprocess.run(["/bin/bash", "-ce", "--", line], capture_output=True, text=True, check=True, env={"V": "submitter"})
    return json.loads(out.stdout)[1:]


def sh(line: str) -> tuple[int, str]:
    done = subprocess.run(["/bin/sh", "-c", line], capture_output=True, text=True, env={"V": "head", "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin"})
    return done.returncode, done.stdout


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("entrypoint", ENTRYPOINTS)
def test_the_head_runs_the_users_entrypoint_whatever_the_layers_do(entrypoint, join):
    given = JOINS[join](words(submitted_entrypoint(entrypoint, "K8sJobMode")))
    assert sh(given) == sh(entrypoint) and sh(entrypoint)[1]


def test_without_the_wrapper_the_cli_mangles_it_as_kuberay_does():
    assert list2cmdline(words(ENTRYPOINTS[0])) == 'python -c print(\\"rj-ok\\")'


def test_http_mode_gets_the_entrypoint_as_it_is():
    """KubeRay posts spec.entrypoint to the dashboard unchanged in HTTPMode."""
    assert submitted_entrypoint("  python -c 'print(1)'\n", "HTTPMode") == "python -c 'print(1)'"
