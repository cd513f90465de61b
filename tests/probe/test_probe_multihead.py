"""The fused K-head trainer equals K separate ``nn.Linear`` + ``torch.optim.SGD`` runs of the published loop."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cog_pl.probe.multihead import evaluate_heads, init_heads, train_heads
from cog_pl.probe.schedule import lr_at

D, C, N, B, EPOCHS = 24, 7, 300, 64, 4

# on CUDA, train_heads replays full batches from a CUDA graph and runs the bf16-mixed update as a Triton kernel
CUDA = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                      reason="needs a CUDA device")])


@pytest.fixture(params=["cpu", CUDA])
def device(request):
    return request.param


def data(seed: int = 0, device: str = "cpu"):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, C, (N,), generator=g)
    x = F.normalize(torch.randn(N, D, generator=g) + 2 * torch.randn(C, D, generator=g)[y], dim=1)
    return x.to(device), y.to(device)


def single_run(x, y, lr, wd, weight, bias, perm_seed):
    """The published loop for one trial (nn.Linear, torch.optim.SGD, cosine step after the epoch)."""
    model = torch.nn.Linear(D, C).to(x.device)
    with torch.no_grad():
        model.weight.copy_(weight)
        model.bias.copy_(bias)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=wd)
    gen = torch.Generator().manual_seed(perm_seed)
    for epoch in range(EPOCHS):
        order = torch.randperm(N, generator=gen).to(x.device)
        for i in range(0, N, B):
            b = order[i : i + B]
            loss = F.cross_entropy(model(x[b]), y[b])
            if not torch.isfinite(loss):
                return model, epoch
            opt.zero_grad()
            loss.backward()
            opt.step()
        for group in opt.param_groups:
            group["lr"] = lr_at(lr, epoch + 1, EPOCHS)
    return model, None


def run_heads(x, y, lrs, wds, init, perm_seed, **kw):
    return train_heads(x, y, lrs, wds, num_classes=C, epochs=EPOCHS, batch_size=B, momentum=0.9,
                       generator=torch.Generator().manual_seed(perm_seed), init=init, eval_x=x, eval_y=y, **kw)


def test_k_heads_equal_k_separate_runs(device):
    x, y = data(device=device)
    lrs, wds = [0.1, 1.0, 7.5, 40.0], [1e-12, 1e-4, 3e-6, 1e-8]
    weight, bias = init_heads(D, C, len(lrs), torch.Generator().manual_seed(1))
    out = run_heads(x, y, lrs, wds, (weight, bias), perm_seed=5)
    for k, (lr, wd) in enumerate(zip(lrs, wds)):
        model, diverged = single_run(x, y, lr, wd, weight[:, k].T, bias[k], perm_seed=5)
        assert diverged is None
        torch.testing.assert_close(out.weight[:, k].T, model.weight.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(out.bias[k], model.bias.detach(), rtol=1e-4, atol=1e-5)
        acc = evaluate_heads(model.weight.detach().T.unsqueeze(1), model.bias.detach().unsqueeze(0), x, y)
        torch.testing.assert_close(out.top1[k], acc[0, 0].cpu())


def test_diverging_head_is_frozen_and_leaves_the_others_alone(device):
    x, y = data(device=device)
    lrs, wds = [1.0, 1e39, 5.0], [1e-6, 1e-6, 1e-6]  # 1e39 overflows float32: the loss turns non-finite
    init = init_heads(D, C, len(lrs), torch.Generator().manual_seed(2))
    together = run_heads(x, y, lrs, wds, init, perm_seed=3, eval_every_epoch=True)
    alone = run_heads(x, y, [lrs[0], lrs[2]], [wds[0], wds[2]], (init[0][:, [0, 2]], init[1][[0, 2]]), perm_seed=3)
    assert together.diverged_epoch == [None, 0, None]
    torch.testing.assert_close(together.weight[:, [0, 2]], alone.weight)
    assert together.top1[1] == 0.0  # rollback: diverged in its first epoch, no state to return to: 0
    assert torch.isfinite(together.weight).all()
    assert len(together.history) == EPOCHS


def test_head_diverging_later_keeps_its_last_evaluated_accuracy(device):
    x, y = data(device=device)
    init = init_heads(D, C, 1, torch.Generator().manual_seed(4))
    lr = 30.0
    # lr * wd far above 2 (1 + momentum): the weights oscillate with growing amplitude and overflow in epoch 2
    out = run_heads(x, y, [lr], [30.0], init, perm_seed=6, eval_every_epoch=True)
    _model, diverged = single_run(x, y, lr, 30.0, init[0][:, 0].T, init[1][0], perm_seed=6)
    assert diverged is not None and diverged > 0
    assert out.diverged_epoch == [diverged]
    assert out.top1[0] == out.history[diverged - 1][0]
    assert out.history[diverged][0] == out.history[diverged - 1][0]


def test_bf16_mixed_heads_follow_the_float32_heads(device):
    """bfloat16 matrix products with float32 weights: same learning, within rounding of the products."""
    x, y = data(device=device)
    lrs, wds = [0.1, 1.0, 7.5, 40.0], [1e-12, 1e-4, 3e-6, 1e-8]
    init = init_heads(D, C, len(lrs), torch.Generator().manual_seed(1))
    full = run_heads(x, y, lrs, wds, init, perm_seed=5, precision="32-true")
    mixed = run_heads(x, y, lrs, wds, init, perm_seed=5, precision="bf16-mixed")
    assert mixed.weight.dtype == torch.float32
    moved = (full.weight - init[0].to(device)).norm()
    assert (mixed.weight - full.weight).norm() < 0.02 * moved  # every head moved the same way
    assert (mixed.weight - full.weight).abs().max() > 0  # and the products did run in bfloat16
    assert (mixed.top1 - full.top1).abs().max() <= 100 * 3 / N  # a few of the N points at most


def test_bf16_mixed_k_heads_equal_separate_runs(device):
    x, y = data(device=device)
    lrs, wds = [0.5, 4.0, 20.0], [1e-5, 1e-9, 1e-6]
    init = init_heads(D, C, len(lrs), torch.Generator().manual_seed(3))
    together = run_heads(x, y, lrs, wds, init, perm_seed=2, precision="bf16-mixed")
    for k in range(len(lrs)):
        alone = run_heads(x, y, [lrs[k]], [wds[k]], (init[0][:, [k]], init[1][[k]]), perm_seed=2,
                          precision="bf16-mixed")
        torch.testing.assert_close(together.weight[:, [k]], alone.weight, rtol=1e-3, atol=1e-4)


def test_precision_is_checked_and_auto_resolves_per_device():
    import pytest

    from cog_pl.device import fast_bf16, resolve_precision
    from cog_pl.probe.multihead import PRECISIONS

    with pytest.raises(ValueError, match="precision"):
        resolve_precision("16-mixed", "cpu", PRECISIONS)
    assert resolve_precision("auto", "cpu", PRECISIONS) == ("bf16-mixed" if fast_bf16("cpu") else "32-true")
    assert resolve_precision("32-true", "cpu", PRECISIONS) == "32-true"


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_eager_step_flags_a_head_at_its_first_nan_softmax_not_at_an_overflow(precision):
    """Weights that overflowed at an epoch's last update are caught by the next step's loss, as in the published
    loop; a NaN softmax (a non-finite loss) is caught in its own epoch."""
    from cog_pl.probe.workspace import HeadsWorkspace

    x, y = data()
    init = init_heads(D, C, 3, torch.Generator().manual_seed(5))
    ws = HeadsWorkspace(x, y, B, init, 0.9, precision, torch.zeros(3 * C))
    ws.step_lr.fill_(0.1)
    ws.params[C : 2 * C, 0] = float("inf")  # head 1 overflowed on the last update of an epoch
    ws.params_changed()
    assert ws.take_flags().tolist() == [False, False, False]
    ws.step(torch.arange(B))  # its logits are inf or NaN now: a non-finite loss
    assert ws.take_flags().tolist() == [False, True, False]
    assert ws.take_flags().tolist() == [False, True, False]  # its momentum stays NaN until it is rolled back


def _published_value(x, y, lr, wd, init, perm_seed):
    """What the published loop returns for a trial: the validation top-1 of the model it stopped with."""
    model, diverged = single_run(x, y, lr, wd, init[0][:, 0].T, init[1][0], perm_seed=perm_seed)
    acc = evaluate_heads(model.weight.detach().T.unsqueeze(1), model.bias.detach().unsqueeze(0), x, y)
    return acc[0, 0].cpu(), diverged


@pytest.mark.parametrize(("lr", "wd", "seed"), [(30.0, 30.0, 4), (1e38, 1e-6, 4)])  # epochs 2 and 0
def test_exact_mode_halt_evaluates_the_model_the_published_loop_stops_with(device, lr, wd, seed):
    """Exact mode (``on_divergence="halt"``): the head keeps the parameters it had at the step whose loss was
    non-finite, and its value is that model's accuracy at the diverging epoch, as published; not the previous
    epoch's (fast mode's rollback) and not 0 for a first-epoch divergence."""
    x, y = data(device=device)
    init = init_heads(D, C, 1, torch.Generator().manual_seed(seed))
    expected, diverged = _published_value(x, y, lr, wd, init, perm_seed=6)
    assert diverged is not None
    halted = run_heads(x, y, [lr], [wd], init, perm_seed=6, eval_every_epoch=True, on_divergence="halt")
    assert halted.diverged_epoch == [diverged]
    assert halted.top1[0] == expected == halted.history[diverged][0] == halted.history[-1][0]
    rolled = run_heads(x, y, [lr], [wd], init, perm_seed=6, eval_every_epoch=True)
    assert rolled.diverged_epoch == [diverged]
    assert rolled.top1[0] == (rolled.history[diverged - 1][0] if diverged else 0.0)
    assert rolled.top1[0] != halted.top1[0]


def test_halted_heads_leave_the_others_alone(device):
    x, y = data(device=device)
    lrs, wds = [1.0, 1e39, 5.0], [1e-6, 1e-6, 1e-6]
    init = init_heads(D, C, len(lrs), torch.Generator().manual_seed(2))
    together = run_heads(x, y, lrs, wds, init, perm_seed=3, eval_every_epoch=True, on_divergence="halt")
    alone = run_heads(x, y, [lrs[0], lrs[2]], [wds[0], wds[2]], (init[0][:, [0, 2]], init[1][[0, 2]]), perm_seed=3)
    assert together.diverged_epoch == [None, 0, None]
    torch.testing.assert_close(together.weight[:, [0, 2]], alone.weight)
    with pytest.raises(ValueError, match="on_divergence"):
        run_heads(x, y, lrs, wds, init, perm_seed=3, on_divergence="ignore")
