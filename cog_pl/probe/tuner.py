"""Hyper-parameter search of one probe: TPE over (lr, wd), trials trained in batches of heads, or one at a time.

``fast`` mode asks TPE's random startup trials all at once and trains them as one batch of heads, then asks later
trials ``trial_batch`` at a time (TPE's constant liar keeps a batch's proposals apart) and evaluates validation only
after the last epoch, the only value the objective reads. This differs from the published search in one respect:
a trial after the startup sees the results of trials up to the previous batch, not of every earlier trial; with
batches of 5 out of 30 trials, 20 of them are proposed with 0-4 results fewer. ``exact`` mode proposes and trains
trials strictly one after another and evaluates validation after every epoch, as published. A trial whose loss turns
non-finite stops: exact mode evaluates the model it stopped with, as published; fast mode rolls it back to the end of
its previous epoch (:attr:`SearchPlan.on_divergence`). Both record the mode.

Precision (:mod:`cog_pl.probe.multihead`): ``auto`` runs the matrix products of fast mode in bfloat16 where the
device does them fast and everything in float32 otherwise; exact mode stays in float32 unless told. The resolved
precision is recorded with every trial and result.

Selection optimism: a search given the test set (``test``) also evaluates each trial's trained head on it after
training (one evaluation of all heads of a batch) and records it in the trial (:data:`TEST_TOP1`), which nothing in
the search reads; :func:`oracle_trial` is the best of them, what selecting on test would have reported.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import optuna
import torch
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, Trial, TrialState
from torch import Tensor

from cog_pl.device import resolve_precision
from cog_pl.errors import CogError
from cog_pl.probe.data import ProbeData, sub_seed
from cog_pl.probe.multihead import PRECISIONS, HeadsResult, evaluate_heads, init_heads, train_heads
from cog_pl.probe.study import ask_trials, fail_trial, tell_result
from cog_pl.protocol import ProbeProtocol

log = logging.getLogger(__name__)

MODES = ("fast", "exact")
RESULT_ATTR = "result"  # user attribute of a finished trial: val_top5, diverged_epoch, mode, precision, batch info
#: The key of :data:`RESULT_ATTR` holding a trial's test top-1 (:func:`oracle_trial`): its head evaluated on the test
#: set after training, never read by the search.
TEST_TOP1 = "test_top1"


@dataclass(frozen=True)
class SearchPlan:
    """How trials are grouped and evaluated; recorded with every result."""

    mode: str = "fast"
    startup_trials: int = 10  # TPE's random startup trials, one batch in fast mode
    trial_batch: int = 5  # later trials per batch in fast mode
    heartbeat_every: float = 30.0  # seconds between renewals of a cell's claim (at most stale_after / 4)
    stale_after: float = 120.0  # seconds after which a silent worker's claim on a cell may be taken over
    precision: str = "auto"  # "auto", "32-true" or "bf16-mixed" (matrix products only)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise CogError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name, low in (("startup_trials", 0), ("trial_batch", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CogError(f"search plan: {name} must be an integer of at least {low}, got {value!r}")
        for name in ("heartbeat_every", "stale_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise CogError(f"search plan: {name} must be a positive number of seconds, got {value!r}")
        if self.precision != "auto":
            resolve_precision(self.precision, "cpu", PRECISIONS)  # rejects an unknown value

    def precision_on(self, device: torch.device | str) -> str:
        """The precision trials and the final probe run with on ``device``."""
        if self.precision == "auto" and self.mode == "exact":
            return "32-true"
        return resolve_precision(self.precision, device, PRECISIONS)

    @property
    def renew_every(self) -> float:
        """Seconds between renewals of a held claim: ``heartbeat_every``, and at least four per ``stale_after``."""
        return min(self.heartbeat_every, self.stale_after / 4)

    @property
    def on_divergence(self) -> str:
        """What a trial whose loss turns non-finite does (:mod:`cog_pl.probe.multihead`): exact mode evaluates the
        model it stopped with, as published; fast mode rolls it back to the end of its previous epoch."""
        return "halt" if self.mode == "exact" else "rollback"

    def batch_size(self, started: int) -> int:
        """Trials to ask next, given how many the study has started (finished or running)."""
        if self.mode == "exact":
            return 1
        return self.startup_trials - started if started < self.startup_trials else self.trial_batch

    def as_record(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class HeadStart:
    """Where every head of a probe starts instead of ``nn.Linear``'s random draw: ``weight`` ``(C, D)`` and ``bias``
    ``(C,)`` (e.g. a text classifier, :mod:`cog_pl.probe.text_init`), the ``method`` its rows are written as, and
    the ``record`` of the start that goes into their identity (as the search record's ``init``)."""

    weight: Tensor
    bias: Tensor
    method: str
    record: dict


def search_record(plan: SearchPlan, head_start: HeadStart | None = None) -> dict:
    """The search record of a probe's rows and studies: the plan's, with the heads' start (``init``) if not random."""
    return plan.as_record() if head_start is None else {**plan.as_record(), "init": head_start.record}


def train_probe(
    data: ProbeData, lrs: list[float], wds: list[float], *, protocol: ProbeProtocol, seeds: list[int],
    perm_seed: int, eval_every_epoch: bool = False, on_epoch_end=None, precision: str = "32-true",
    on_divergence: str = "rollback", head_start: HeadStart | None = None,
) -> HeadsResult:
    """Train one head per (lr, wd), head ``i`` initialised from ``seeds[i]``, batches from ``perm_seed``; with
    ``head_start``, every head starts from its weight and bias instead (the seeds then draw nothing)."""
    dim = data.train_x.shape[1]
    if head_start is None:
        inits = [init_heads(dim, data.num_classes, 1, torch.Generator().manual_seed(s)) for s in seeds]
        init = (torch.cat([w for w, _ in inits], dim=1), torch.cat([b for _, b in inits], dim=0))
    else:
        init = start_heads(head_start, dim, data.num_classes, len(lrs))
    return train_heads(
        data.train_x, data.train_y, lrs, wds, num_classes=data.num_classes, epochs=protocol.epochs,
        batch_size=protocol.batch_size, momentum=protocol.momentum,
        generator=torch.Generator().manual_seed(perm_seed), init=init, eval_x=data.eval_x, eval_y=data.eval_y,
        eval_every_epoch=eval_every_epoch, on_epoch_end=on_epoch_end, precision=precision, on_divergence=on_divergence,
    )


def start_heads(start: HeadStart, dim: int, classes: int, k: int) -> tuple[Tensor, Tensor]:
    """``k`` heads' initial (weight ``(D, K, C)``, bias ``(K, C)``), each a float32 copy of ``start``'s."""
    if tuple(start.weight.shape) != (classes, dim) or tuple(start.bias.shape) != (classes,):
        raise CogError(f"the heads' start ({start.record.get('from', '?')}) has weight {tuple(start.weight.shape)} "
                       f"and bias {tuple(start.bias.shape)}; the probe needs ({classes}, {dim}) and ({classes},): "
                       "its embedding or classes differ from the features'")
    weight = start.weight.detach().float().cpu().T.reshape(dim, 1, classes).expand(dim, k, classes).contiguous()
    return weight, start.bias.detach().float().cpu().reshape(1, classes).expand(k, classes).contiguous()


def search_space(protocol: ProbeProtocol) -> dict[str, FloatDistribution]:
    """The protocol's (lr, wd) space, both log-uniform."""
    return {"lr": FloatDistribution(*protocol.lr_range, log=True),
            "wd": FloatDistribution(*protocol.wd_range, log=True)}


def test_scores(result: HeadsResult, test: tuple[Tensor, Tensor], on_divergence: str) -> list[float]:
    """Each trained head's test top-1 (percent): what selecting on test would compare (:func:`oracle_trial`). A head
    scored 0 on validation because it has no state (rolled back in its first epoch) scores 0 here too."""
    top1 = evaluate_heads(result.weight, result.bias, *test)[:, 0].cpu()
    return [0.0 if on_divergence == "rollback" and e == 0 else float(v) for v, e in zip(top1, result.diverged_epoch)]


def run_batch(study: optuna.Study, trials: list[Trial], data: ProbeData, protocol: ProbeProtocol,
              plan: SearchPlan, seed: int, test: tuple[Tensor, Tensor] | None = None,
              head_start: HeadStart | None = None) -> None:
    """Train a batch of asked trials side by side and tell their results. ``test``: the test features and labels
    (on the heads' device), on which every trained head is also evaluated after training (:data:`TEST_TOP1`); the
    search never reads it. ``head_start``: the heads' start (:func:`train_probe`)."""
    precision = plan.precision_on(data.train_x.device)
    start = time.perf_counter()
    try:
        result = train_probe(
            data, [t.params["lr"] for t in trials], [t.params["wd"] for t in trials], protocol=protocol,
            seeds=[sub_seed(seed, 10, t.number) for t in trials], perm_seed=sub_seed(seed, 11, trials[0].number),
            eval_every_epoch=plan.mode == "exact", precision=precision, on_divergence=plan.on_divergence,
            head_start=head_start,
        )
        tested = None if test is None else test_scores(result, test, plan.on_divergence)
    except BaseException as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else ""
        for t in trials:
            fail_trial(study, t, "stopped", f"its batch stopped ({type(err).__name__}{': ' + text if text else ''})")
        raise
    seconds = time.perf_counter() - start
    for i, t in enumerate(trials):
        tell_result(study, t, float(result.top1[i]), {RESULT_ATTR: {  # one attribute: one storage transaction
            "val_top5": float(result.top5[i]), "diverged_epoch": result.diverged_epoch[i], "mode": plan.mode,
            "precision": precision, "batch_seconds": seconds, "batch_heads": len(trials),
            **({} if tested is None else {TEST_TOP1: tested[i]})}},
            history=[float(acc[i]) for acc in (result.history if plan.mode == "exact" else [])])
    log.info("trials %s: val top-1 %s (%.1fs)", [t.number for t in trials],
             [round(float(a), 2) for a in result.top1], seconds)


def run_search(study: optuna.Study, data: ProbeData, protocol: ProbeProtocol, plan: SearchPlan, seed: int,
               test: tuple[Tensor, Tensor] | None = None, head_start: HeadStart | None = None) -> None:
    """Tune the study, its one writer, until it holds ``protocol.trials`` finished trials (``test``, ``head_start``: as
    :func:`run_batch`'s)."""
    space = search_space(protocol)
    while (complete := len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))) < protocol.trials:
        n = min(plan.batch_size(complete), protocol.trials - complete)
        run_batch(study, ask_trials(study, n, space, seed, plan.startup_trials), data, protocol, plan, seed, test,
                  head_start)


def best_trial(study: optuna.Study) -> FrozenTrial:
    """The finished trial with the highest validation top-1 (lowest number on ties)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not done:
        raise RuntimeError(f"study {study.study_name} has no finished trial")
    return max(done, key=lambda t: (t.value, -t.number))


def oracle_trial(study: optuna.Study) -> tuple[int, float] | None:
    """The finished trial with the highest test top-1 (lowest number on ties) and that top-1: what selecting on test
    would have reported (selection optimism: it is at least the selected trial's test top-1 of the same heads). None
    where a finished trial has no test top-1 (trained by a cog_pl that did not evaluate it)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    scores = [(t.number, t.user_attrs.get(RESULT_ATTR, {}).get(TEST_TOP1)) for t in done]
    if not scores or any(v is None for _, v in scores):
        return None
    number, value = max(scores, key=lambda p: (p[1], -p[0]))
    return number, float(value)
