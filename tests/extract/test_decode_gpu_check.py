"""``scripts/gpu_check.sh`` runs on a CPU: tiny sizes, the GPU parts skipped, one summary table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke run; on a GPU run the script itself")
def test_the_gpu_check_runs_on_a_cpu_with_the_gpu_parts_skipped(tmp_path):
    env = {**os.environ, "GPU_CHECK_OUT": str(tmp_path), "PYTHON": sys.executable}
    out = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                         timeout=600, cwd=REPO).stdout
    table = out[out.index("GPU check (no CUDA: smoke run, tiny=1)"):]
    for step in ("gpu-tests", "extract-cpu", "probe-grid"):
        [line] = [x for x in table.splitlines() if x.startswith(step)]
        assert line.split()[1] == "ok", (step, (tmp_path / f"{step}.log").read_text()[-2000:])
    assert "probe-gpu      skipped" in table
    assert "rows identical: True" in table  # the grid's rows with workers equal one worker's
    for path in ("pil", "cpu", "gpu"):  # the gpu path ran on the CPU device
        assert any(x.split()[:1] == [path] for x in table.splitlines())
