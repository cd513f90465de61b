"""The GPU shortcuts of the probe's step (two Triton kernels, CUDA graph replay) compute what the eager step does."""

from __future__ import annotations

import importlib.util
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
    rows, width = 1000 + 3, 37  # a row per (head, class), with its own lr and wd
    p, buf = torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)
    grad = torch.randn(rows, width, generator=g)
    p[3, 5], grad[4, 7] = float("nan"), float("inf")
    lr, wd = torch.rand(rows, generator=g) * 5, torch.rand(rows, generator=g) * 1e-3
    p, buf, grad, lr, wd = (t.to(device) for t in (p, buf, grad, lr, wd))
    grad = grad.bfloat16()
    want_p, want_buf = p.clone(), buf.clone()
    want_buf.mul_(0.9).add_(grad.float(), alpha=1 / 1024)
    want_buf.addcmul_(want_p, wd.view(-1, 1))
    want_p.addcmul_(want_buf, lr.view(-1, 1), value=-1.0)
    low = torch.empty(rows, width, dtype=torch.bfloat16, device=device)
    sgd_update_(p, buf, grad, low, lr, wd, 0.9, 1 / 1024)
    torch.testing.assert_close(p, want_p, rtol=1e-6, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(buf, want_buf, rtol=1e-6, atol=1e-6, equal_nan=True)
    finite = torch.isfinite(p)
    return {"nonfinite_kept": bool((~torch.isfinite(low.float()) == ~finite).all()),
            "low_rel": ((low.float() - p)[finite].abs() / p[finite].abs().clamp_min(1e-30)).max().item(),
            "low_exact": bool((low[finite] == p[finite].bfloat16()).all())}


def _ce_case(device: str) -> dict:
    """The cross-entropy gradient kernel against the eager step's PyTorch ops, float32 and bfloat16 logits, with rows
    whose loss is non-finite in some heads: +inf logit (head 1), NaN logit (head 2), -inf target logit (head 3)."""
    from cog_pl.probe.kernels import ce_grad_

    g = torch.Generator().manual_seed(1)
    nb, k, c = 37, 5, 1000 + 11
    logits = torch.randn(nb, k * c, generator=g) * 4
    y = torch.randint(0, c, (200,), generator=g)
    idx = torch.randperm(200, generator=g)[:nb]
    labels = y[idx]
    logits[3, 1 * c + 17] = float("inf")
    logits[5, 2 * c + 2] = float("nan")
    logits[7, 3 * c + int(labels[7])] = float("-inf")
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        z = logits.to(dtype)
        probs = torch.softmax(z.float().view(nb, k, c), 2)
        want = probs.clone()
        want[torch.arange(nb), :, labels] -= 1.0
        target = z.float().view(nb, k, c)[torch.arange(nb), :, labels] + probs[torch.arange(nb), :, labels]
        want_bad = ~torch.isfinite(target.sum(0))
        grad = torch.empty(nb, k * c, dtype=dtype, device=device)
        bad = torch.zeros(k, dtype=torch.bool, device=device)
        ce_grad_(z.to(device), grad, y.to(device), idx.to(device), bad, k)
        grad = grad.float().cpu().view(nb, k, c)
        ok = ~want_bad  # heads whose every row is finite
        tol = dict(rtol=1e-5, atol=1e-7) if dtype == torch.float32 else dict(rtol=2**-7, atol=1e-6)
        torch.testing.assert_close(grad[:, ok], want[:, ok].to(dtype).float(), **tol)
        out[str(dtype)] = {"bad": bad.cpu().tolist(), "want_bad": want_bad.tolist(),
                           "bad_rows_nonfinite": bool((~torch.isfinite(grad[3, 1])).any()
                                                      and (~torch.isfinite(grad[5, 2])).any())}
    return out


# TRITON_INTERPRET=1 is read when a kernel is compiled, so the CPU runs are processes of their own
def _interpreted(case: str) -> dict:
    return _interpreted_code(f"import json; from tests.probe.test_probe_workspace import {case}; "
                             f"print(json.dumps({case}('cpu')))")


def _interpreted_code(code: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_triton_update_kernel_equals_the_pytorch_update():
    case = _interpreted("_update_case")
    assert case["nonfinite_kept"]
    # Triton's interpreter rounds float32 to bfloat16 towards zero (GPUs round to nearest, checked on CUDA below)
    assert case["low_rel"] <= 2.0**-7


def test_triton_cross_entropy_kernel_equals_the_pytorch_ops():
    for case in _interpreted("_ce_case").values():
        assert case["bad"] == case["want_bad"] == [False, True, True, True, False]
        assert case["bad_rows_nonfinite"]


@pytest.mark.gpu
@CUDA
def test_triton_kernels_on_cuda():
    case = _update_case("cuda")
    assert case["nonfinite_kept"] and case["low_exact"]
    for case in _ce_case("cuda").values():
        assert case["bad"] == case["want_bad"] == [False, True, True, True, False]


def test_kernels_run_by_default_on_cuda_only():
    assert not fused_update_supported("cpu") and not fused_update_supported("meta")
    assert fused_update_supported("cuda") == (importlib.util.find_spec("triton") is not None)


def _train_case(device: str, precision: str, n: int = 1500, b: int = 256, kernels: bool = True) -> dict:
    """``train_heads`` as it runs on ``device`` (the kernels unless ``kernels`` is False, CUDA graphs) against the
    eager PyTorch step, 3 epochs of 4 heads (the last batch of each epoch a smaller one), the last diverging in its
    first epoch."""
    from cog_pl.probe import multihead, workspace
    from cog_pl.probe.multihead import init_heads, train_heads

    g = torch.Generator().manual_seed(0)
    d, c = 64, 10
    y = torch.randint(0, c, (n,), generator=g)
    x = torch.nn.functional.normalize(torch.randn(n, d, generator=g) + 2 * torch.randn(c, d, generator=g)[y], dim=1)
    x, y = x.to(device), y.to(device)
    lrs, wds = [0.3, 2.0, 9.0, 1e39], [1e-4, 1e-6, 1e-3, 1e-6]
    init = init_heads(d, c, len(lrs), g)

    def run():
        return train_heads(x, y, lrs, wds, num_classes=c, epochs=3, batch_size=b, momentum=0.9,
                           generator=torch.Generator().manual_seed(2), init=init, eval_x=x, eval_y=y,
                           precision=precision)

    saved = multihead.stepper, workspace.fused_update_supported
    try:
        workspace.fused_update_supported = lambda device: kernels  # on the CPU under the interpreter
        fast = run()
        multihead.stepper, workspace.fused_update_supported = (lambda ws, batch_size: ws.step), (lambda device: False)
        eager = run()
    finally:
        multihead.stepper, workspace.fused_update_supported = saved
    w_fast, w_eager = fast.weight[:, :3].cpu(), eager.weight[:, :3].cpu()
    return {"diverged": [fast.diverged_epoch, eager.diverged_epoch],
            "max_diff": (w_fast - w_eager).abs().max().item(),
            "rel_diff": ((w_fast - w_eager).norm() / (w_eager - init[0][:, :3]).norm()).item(),
            "top1_diff": (fast.top1 - eager.top1).abs().max().item(), "rows": n}


def _check_train_case(case: dict, precision: str, rounding_to_zero: bool = False) -> None:
    assert case["diverged"][0] == case["diverged"][1] == [None, None, None, 0]
    if precision == "32-true":  # the same arithmetic up to float32 rounding
        assert case["max_diff"] < 1e-4 and case["top1_diff"] == 0
    else:  # a last-bit difference can flip a weight's bfloat16 rounding: the same learning, not the same bits
        assert case["rel_diff"] < (0.05 if rounding_to_zero else 0.02)
        assert case["top1_diff"] <= 100 * 10 / case["rows"]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_kernels_in_the_training_loop_equal_the_eager_step(precision):
    code = f"import json; from tests.probe.test_probe_workspace import _train_case; " \
           f"print(json.dumps(_train_case('cpu', {precision!r}, n=400, b=64)))"  # the interpreter is slow
    _check_train_case(_interpreted_code(code), precision, rounding_to_zero=True)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_cuda_graphs_and_kernels_equal_the_eager_step(precision):
    _check_train_case(_train_case("cuda", precision), precision)


@pytest.mark.gpu
@CUDA
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_cuda_graphs_of_the_pytorch_step_equal_the_eager_step(precision):
    """Without Triton (Windows builds) the graph replays the PyTorch step: no state of it may live in Python."""
    _check_train_case(_train_case("cuda", precision, kernels=False), precision)
