"""fashion_mnist from its compiled YAML: Ray Train over 2 workers on 2 Ray nodes (head and
one worker pod), torch installed on each node by runtime_env pip (the Ray image has none).
Its own module: the longest run, spread by xdist apart from the others."""

from __future__ import annotations

import re

import pytest

from tests.opt_in import full_only
from tests.pipelines.cli_runs import run_cli, summary_metrics

pytestmark = pytest.mark.ray


# 2.25's platform (the `compile --rhoai 2.25` YAML, the CodeFlare operator's cluster, its CA) runs
# end to end in every run through interactive_train, ray_training and the RayJob pipeline
TWO_25 = "interactive_train's, test_job_contract's and test_run_rayjob's 2.25 runs, test_platform"


# the 3.3 run's ground (fashion_mnist trained over a head and a GPU-node worker, its accuracy, its
# checkpoints) is test_run_preempted's in every run, preempted and resumed too; the CLI's is test_run_local's
THREE_3 = "test_run_preempted (fashion_mnist from compiled/ on the DSP server, a GPU-node worker) and test_run_local"


@pytest.mark.parametrize("platform", [pytest.param("rhoai-3.3", marks=full_only(THREE_3)),
                                      pytest.param("rhoai-2.25", marks=full_only(TWO_25))])
def test_fashion_mnist_ray_train_through_the_cli_with_a_gpu_worker(platform):
    """On either release (2.25: the `compile --rhoai 2.25` YAML, the CodeFlare operator's
    cluster); 2.25 trains one epoch: the release differs in the platform, not the training."""
    # one worker pod, not the default two: each node unpacks torch (~700 MB) on this 2-core
    # machine, and two nodes still make it distributed. worker_gpus=1: the worker lands on the
    # pool's GPU node (the pipeline tolerates its taint) and its Ray node advertises the GPU;
    # training stays on CPU (use_gpu=false: there is no CUDA here).
    epochs = 2 if platform == "rhoai-3.3" else 1  # 2: several epochs and checkpoints, 0.72 here
    run = run_cli("fashion_mnist", f"epochs={epochs}", "num_workers=1", "worker_gpus=1", platform=platform)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"platform: {platform} " in run.stdout
    assert re.search(r"pods on nodes: head worker-\d, worker gpu-worker-0", run.stdout), run.stdout[-4000:]
    m = summary_metrics(run.stdout)
    assert m["accuracy"] > (0.6 if epochs == 2 else 0.4) and m["workers"] == 2  # 10 classes: chance is 10%
    assert re.search(r"[1-9]\d* checkpoint files, model yes", run.stdout)
