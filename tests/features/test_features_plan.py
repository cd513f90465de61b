"""The plan of a store's life (cog_pl.features.plan), on real store folders made by the real writer: skip a finished
store of the same inputs, finish one whose rows were all written, resume one with rows left, start one afresh,
refuse a store made by other inputs in the words users see, and write nothing while deciding."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cog_pl.features.missing import mark_missing
from cog_pl.features.plan import Action, Policy, needs_rows, plan_store, store_identity
from cog_pl.features.store import StoreError, StoreWriter, make_meta, write_store

ROWS, DIM = 5, 3


def _want(model: str = "m", **data) -> dict:
    model_meta = make_meta(model=model, arch="resnet50", weights_sha256=None, precision="32-true")
    data_meta = {"domain": "in1k", "split": "train", "num_classes": 2, "classes": ["a", "b"],
                 "transform": {"crop": 4}, "level_file_sha256": None, **data}
    return store_identity(model_meta, data_meta, "float16", "pil")


def _partial(path: Path, rows, want: dict | None = None) -> StoreWriter:
    """An interrupted write: ``rows`` written, never finished."""
    writer = StoreWriter(path, ROWS, DIM, identity=want or _want())
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows):
        writer.write(rows, np.ones((len(rows), DIM)), rows % 2, rows)
    return writer


def _finished(path: Path, want: dict | None = None) -> None:
    write_store(path, np.ones((ROWS, DIM)), np.arange(ROWS) % 2, None, dict(want or _want()))


def _tree(root: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def test_each_state_of_a_store_gets_its_action(tmp_path):
    fresh, resumed, ready, done = (tmp_path / n / "train" for n in ("fresh", "resumed", "ready", "done"))
    _partial(resumed, [0, 1, 2])
    _partial(ready, range(ROWS))
    _finished(done)
    policy, before = Policy(), _tree(tmp_path)

    plan = plan_store(fresh, _want(), policy, ROWS)
    assert plan.action is Action.FRESH and plan.rows_left.tolist() == list(range(ROWS)) and not plan.overwrite
    plan = plan_store(resumed, _want(), policy, ROWS)
    assert plan.action is Action.RESUME and plan.rows_left.tolist() == [3, 4] and plan.num_rows == ROWS
    plan = plan_store(ready, _want(), policy, ROWS)
    assert plan.action is Action.FINISH and plan.rows_left.tolist() == []
    assert not needs_rows(done, policy)  # a finished store kept is planned without its images
    plan = plan_store(done, _want(), policy)
    assert plan.action is Action.SKIP and plan.num_rows is None
    assert _tree(tmp_path) == before  # deciding wrote, tidied and finished nothing


def test_overwrite_plans_every_store_afresh_whoever_made_it(tmp_path):
    partial, done = tmp_path / "p" / "train", tmp_path / "d" / "train"
    _partial(partial, [0, 1], _want(model="other"))
    _finished(done, _want(model="other"))
    policy = Policy(overwrite=True)
    assert needs_rows(done, policy)
    for path in (partial, done):
        plan = plan_store(path, _want(), policy, ROWS)
        assert plan.action is Action.FRESH and plan.overwrite and plan.rows_left.tolist() == list(range(ROWS))


def test_a_store_of_other_inputs_is_refused_naming_the_difference(tmp_path):
    done, partial = tmp_path / "d" / "train", tmp_path / "p" / "train"
    _finished(done, _want(model="other"))
    _partial(partial, [0], _want(model="other"))
    hint = r"pass --overwrite \(cog-pl extract: --data.overwrite true\) to replace it"
    with pytest.raises(StoreError, match=rf"^{done}: feature store made with different inputs: model='other' "
                                         rf"\(this run: 'm'\); {hint}$"):
        plan_store(done, _want(), Policy())
    with pytest.raises(StoreError, match=rf"\.train\.partial: interrupted feature store write made with different "
                                         rf"inputs: model='other' \(this run: 'm'\); {hint}$"):
        plan_store(partial, _want(), Policy(), ROWS)


def test_rows_of_unreadable_images_follow_the_runs_policy(tmp_path):
    """An interrupted write that skipped row 4 as unreadable: under on_error=fail the row is read again (resume), under
    skip the store only needs finishing; a finished store lacking a row is kept only by a policy that allows it."""
    partial, done = tmp_path / "p" / "train", tmp_path / "d" / "train"
    writer = _partial(partial, range(ROWS - 1))
    mark_missing(writer, np.array([ROWS - 1]), np.array([0]), ["n1/x.jpg"], ["truncated"])
    plan = plan_store(partial, _want(), Policy(on_error="fail"), ROWS)
    assert plan.action is Action.RESUME and plan.rows_left.tolist() == [ROWS - 1] and plan.max_missing == 0
    plan = plan_store(partial, _want(), Policy(on_error="skip", max_skipped=2), ROWS)
    assert plan.action is Action.FINISH and plan.max_missing == 2
    writer.finish({**_want(), "weights_sha256": None})
    partial.parent.rename(done.parent)
    assert plan_store(done, _want(), Policy(on_error="skip", max_skipped=1)).action is Action.SKIP
    with pytest.raises(StoreError, match=rf"^{done}: finished with 1 of {ROWS} images missing \(skipped as "
                                         r"unreadable\), but this run's on_error=fail allows none; pass --overwrite"):
        plan_store(done, _want(), Policy())


def test_a_plan_is_frozen_and_planning_imports_no_torch(tmp_path):
    plan = plan_store(tmp_path / "s", _want(), Policy(), ROWS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.action = Action.SKIP
    with pytest.raises((TypeError, ValueError)):
        plan.rows_left[0] = 9
    with pytest.raises(TypeError):
        plan.want["model"] = "x"
    with pytest.raises(ValueError, match="on_error='retry'"):
        Policy(on_error="retry")
    code = "import sys, cog_pl.features.plan; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
