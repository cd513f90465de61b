"""The GPU-only shortcuts of the probe's step (Triton update kernel, CUDA graph replay) compute the eager step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from cog_pl.probe.kernels import fused_update_supported

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

def _update_case(device: str) -> dict:
    """One Triton update against PyTorch's six passes on odd shapes (a partial last block), NaN/inf included."""
    from cog_pl.probe.kernels import sgd_update_

    g = torch.Generator().manual_seed(0)
    rows, columns = 37, 1000 + 3
    p, buf = torch.randn(rows, columns, generator=g), torch.randn(rows, columns, generator=g)
    grad = torch.randn(rows, columns, generator=g)
    p[3, 5], grad[4, 7] = float("nan"), float("inf")
    lr, wd = torch.rand(columns, generator=g) * 5, torch.rand(columns, generator=g) * 1e-3
    p, buf, grad, lr, wd = (t.to(device) for t in (p, buf, grad, lr, wd))
    grad = grad.bfloat16()
    want_p, want_buf = p.clone(), buf.clone()
    want_buf.mul_(0.9).add_(grad.float(), alpha=1 / 1024)
    want_buf.addcmul_(want_p, wd)
    want_p.addcmul_(want_buf, lr, value=-1.0)
    low = torch.empty(rows, columns, dtype=torch.bfloat16, device=device)
    sgd_update_(p, buf, grad, low, lr, wd, 0.9, 1 / 1024)
    torch.testing.assert_close(p, want_p, rtol=1e-6, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(buf, want_buf, rtol=1e-6, atol=1e-6, equal_nan=True)
    finite = torch.isfinite(p)
    return {"nonfinite_kept": bool((~torch.isfinite(low.float()) == ~finite).all()),
            "low_rel": ((low.float() - p)[finite].abs() / p[finite].abs().clamp_min(1e-30)).max().item(),
            "low_exact": bool((low[finite] == p[finite].bfloat16()).all())}


# TRITON_INTERPRET=1 is read when the kernel is compiled, so the CPU run is a process of its own
_INTERPRETED = "import json; from tests.test_probe_workspace import _update_case; print(json.dumps(_update_case('cpu')))"


def test_triton_update_kernel_equals_the_pytorch_update():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _INTERPRETED], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    case = json.loads(out.stdout.strip().splitlines()[-1])
    assert case["nonfinite_kept"]
    # Triton's interpreter rounds float32 to bfloat16 towards zero (GPUs round to nearest, checked on CUDA below)
    assert case["low_rel"] <= 2.0**-7


@pytest.mark.gpu
@CUDA
def test_triton_update_kernel_on_cuda():
    case = _update_case("cuda")
    assert case["nonfinite_kept"] and case["low_exact"]


def test_fused_update_runs_only_where_triton_can():
    if os.environ.get("TRITON_INTERPRET") != "1":
        assert not fused_update_supported("cpu")
    assert not fused_update_supported("meta")


@pytest.mark.gpu
@CUDA
def test_cuda_graphs_and_fused_update_equal_the_eager_step(monkeypatch):
    from cog_pl.probe import multihead, workspace
    from cog_pl.probe.multihead import init_heads, train_heads

    g = torch.Generator().manual_seed(0)
    n, d, c, b = 3000, 64, 10, 256
    x = torch.nn.functional.normalize(torch.randn(n, d, generator=g), dim=1).cuda()
    y = torch.randint(0, c, (n,), generator=g).cuda()
    lrs, wds = [0.3, 2.0, 9.0, 1e39], [1e-4, 1e-6, 1e-3, 1e-6]  # the last one diverges
    init = init_heads(d, c, len(lrs), g)

    def run():
        return train_heads(x, y, lrs, wds, num_classes=c, epochs=3, batch_size=b, momentum=0.9,
                           generator=torch.Generator().manual_seed(2), init=init, eval_x=x, eval_y=y,
                           precision="bf16-mixed")

    fast = run()
    monkeypatch.setattr(multihead, "stepper", lambda ws, batch_size: ws.step)
    monkeypatch.setattr(workspace, "fused_update_supported", lambda device: False)
    eager = run()
    assert fast.diverged_epoch == eager.diverged_epoch == [None, None, None, 0]
    torch.testing.assert_close(fast.weight[:, :3], eager.weight[:, :3], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast.top1, eager.top1)
