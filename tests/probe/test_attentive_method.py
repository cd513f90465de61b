"""The attentive and MLP probe methods (issue 40, item 2): a bank of heads trained in one pass equals the same heads
trained one by one with ``torch.optim.AdamW`` under V-JEPA 2's schedule; a grid through the method table writes rows
with the linear probe's keys, the selection-optimism field recomputed from the trials, refuses rows of another
preset or width, and resumes."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from test_probe_fixtures import write_features

from cog_pl.evaluate import list_methods, method_label
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.probe.attentive import HeadSettings, make_head, train_bank
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
from cog_pl.results import read_rows


def _vjepa2_lr(step, ref_lr, start_lr, final_lr, warmup_steps, t_max):
    """``WarmupCosineLRSchedule.step`` of facebookresearch/vjepa2 (c2963a4) evals/image_classification_frozen/eval.py
    l.436-454, for one param group, ``step`` counted as it counts (incremented before use)."""
    t_max = t_max - warmup_steps
    if step < warmup_steps:
        progress = float(step) / float(max(1, warmup_steps))
        return start_lr + progress * (ref_lr - start_lr)
    progress = float(step - warmup_steps) / float(max(1, t_max))
    return max(final_lr, final_lr + (ref_lr - final_lr) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _alone(head, x, y, lr, wd, *, epochs, batch_size, seed, warmup_fraction=0.25, start_lr=2e-4):
    """One head trained as V-JEPA 2 trains each of its heads: AdamW (defaults) over all its parameters, the
    schedule stepped before each optimizer step (eval.py l.281-309), a constant weight decay (in1k.yaml: the final
    weight decay equals the weight decay)."""
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=wd)
    generator = torch.Generator().manual_seed(seed)
    ipe = -(-len(y) // batch_size)
    warmup, t_max = int(warmup_fraction * epochs * ipe), epochs * ipe
    step = 0
    for _ in range(epochs):
        head.train()
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            idx = order[start:start + batch_size]
            step += 1
            for group in opt.param_groups:
                group["lr"] = _vjepa2_lr(step, lr, start_lr, 0.0, warmup, t_max)
            loss = torch.nn.functional.cross_entropy(head(x[idx]), y[idx])
            loss.backward()
            opt.step()
            opt.zero_grad()
    head.eval()
    return head


@pytest.mark.parametrize(("kind", "preset"), [("attentive", "capi"), ("attentive", "vjepa2"), ("attentive", "ep"),
                                              ("mlp", "capi")])
def test_heads_trained_in_one_pass_equal_the_same_heads_trained_one_by_one(kind, preset):
    """Every preset's parameters (V-JEPA 2's token blocks, EP's BatchNorm statistics) and the MLP's."""
    torch.manual_seed(0)
    tokens = 3 if kind == "attentive" else 1
    x = torch.randn(40, tokens, 64)
    y = torch.randint(0, 4, (40,))
    settings = HeadSettings(kind=kind, preset=preset, hidden=8)
    lrs, wds = [3e-3, 1e-2, 5e-4], [1e-3, 5e-2, 1e-4]
    heads = [make_head(settings, 64, 4, seed) for seed in (1, 2, 3)]
    inputs = x if kind == "attentive" else x[:, 0]
    result = train_bank(settings, [copy.deepcopy(h) for h in heads], inputs, y, lrs, wds, epochs=3, batch_size=16,
                        generator=torch.Generator().manual_seed(7), evaluate={"test": (inputs, y)}, rank_last=True)
    for i, head in enumerate(heads):
        alone = _alone(head, inputs, y, lrs[i], wds[i], epochs=3, batch_size=16, seed=7)
        with torch.no_grad():
            logits = alone(inputs)
            banked = result.bank(inputs)[i]
        torch.testing.assert_close(banked, logits, rtol=1e-5, atol=1e-5)
        top1 = 100.0 * float((logits.argmax(1) == y).double().mean())
        assert result.top1["test"][i].item() == pytest.approx(top1, abs=1e-4)
        assert torch.equal(result.ranked[i][:, 0], logits.argmax(1))
    with torch.no_grad():  # the heads learned apart: each one's (lr, wd) reached it
        out = result.bank(inputs)
    assert not torch.allclose(out[0], out[1], atol=1e-3)


def test_the_methods_are_registered_with_their_labels_and_order():
    assert list_methods(probe=True) == ("linear", "linear_text_init", "zeroshot", "attentive", "mlp", "ridge",
                                        "knn")
    assert (method_label("attentive"), method_label("mlp")) == ("attentive probe", "MLP probe")


PROTOCOL = replace(ProbeProtocol(), trials=4, epochs=2, batch_size=32)
PLAN = SearchPlan(startup_trials=2, trial_batch=2, precision="32-true")  # "auto" is bf16-mixed on a CPU with AMX
KEYS = {"format_version", "model", "method", "domain", "shots", "seed", "lr", "wd", "best_trial", "val_top1",
        "val_top5", "test_top1", "test_top5", "selected_test_top1", "oracle_test_top1", "trials", "train_rows",
        "tuning_rows", "val_rows", "head", "protocol", "search", "precision", "features", "identity", "preset",
        "hidden", "feature", "seconds", "predictions"}


def _options(preset=None, hidden=None):
    return {k: v for k, v in (("preset", preset), ("hidden", hidden)) if v is not None} or None


def _run(method, root, results, preset=None, hidden=None, **kwargs):
    grid = {"model": "m", "domain": "cog_l1", "protocol": PROTOCOL, "plan": PLAN, "seeds": (22,), "shots": (None, 2),
            "device": "cpu", **kwargs}
    return run_on_stores(method, root, results, options=_options(preset, hidden), **grid)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """An attentive and an MLP grid (all data and 2 shots) on small stores, and their rows."""
    tmp = tmp_path_factory.mktemp("attentive")
    root = write_features(tmp / "feats", classes=4, dim=64, per_class=20, test_per_class=5)
    results = tmp / "rows.sqlite"
    made = {m: _run(m, root, results, **({"hidden": 16} if m == "mlp" else {})) for m in ("attentive", "mlp")}
    return root, results, made


def test_a_grid_through_the_table_writes_rows_with_the_probe_keys_and_resumes(grid):
    root, results, _ = grid
    stored = read_rows(results)
    assert sorted((r["method"], r["shots"] or 0) for r in stored) == [
        ("attentive", 0), ("attentive", 2), ("mlp", 0), ("mlp", 2)]
    for row in stored:
        assert KEYS <= set(row), KEYS - set(row)
        assert len(row["trials"]) == PROTOCOL.trials and row["predictions"]["images"] == 20
    attentive = {r["shots"]: r for r in stored if r["method"] == "attentive"}
    assert attentive[None]["preset"] == "capi" and attentive[None]["head"]["preset"] == "capi"
    assert attentive[None]["train_rows"] == 80 and attentive[2]["train_rows"] == 8
    assert {r["hidden"] for r in stored if r["method"] == "mlp"} == {16}
    assert _run("attentive", root, results) == []  # resumed: every row exists with the same identity
    assert _run("mlp", root, results, hidden=16) == []


def test_the_selection_optimism_field_is_the_best_trial_s_test_top1_recomputed_from_the_trials(grid):
    """The oracle is the maximum over the trials' test top-1, and that trial's test top-1 is what its head, trained
    again here alone from its recorded seeds on the tuning rows, scores on test."""
    import numpy as np

    from cog_pl.data.sampling import tuning_indices
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.data import load_store

    root, results, _ = grid
    row = next(r for r in read_rows(results) if r["method"] == "attentive" and r["shots"] is None)
    assert row["oracle_test_top1"] == max(t["test_top1"] for t in row["trials"])
    best = next(t for t in row["trials"] if t["number"] == row["best_trial"])  # selected on held-out data
    assert row["selected_test_top1"] == best["test_top1"] <= row["oracle_test_top1"]  # the report's optimism >= 0
    pair = open_pair(root)
    (tx, ty), (sx, sy) = load_store(pair.train), load_store(pair.test)
    train_idx, _ = tuning_indices(ty.numpy(), 0.2, 22, None)
    rows = torch.from_numpy(np.asarray(train_idx))
    for trial in row["trials"]:
        head = make_head(HeadSettings(), 64, 4, trial["init_seed"])
        alone = _alone(head, tx[rows][:, None], ty[rows], trial["lr"], trial["wd"], epochs=PROTOCOL.epochs,
                       batch_size=PROTOCOL.batch_size, seed=trial["perm_seed"])
        with torch.no_grad():
            top1 = 100.0 * float((alone(sx[:, None]).argmax(1) == sy).double().mean())
        assert trial["test_top1"] == pytest.approx(top1, abs=1e-4), trial


def test_a_row_of_another_preset_or_width_is_refused_before_any_work(grid):
    root, results, _ = grid
    with pytest.raises(ValueError, match=r"row m/attentive/cog_l1/shots=all/seed=22 was made with preset=capi.*"
                                         r"this run has preset=vjepa.*--overwrite"):
        _run("attentive", root, results, preset="vjepa", check_only=True)
    with pytest.raises(ValueError, match=r"was made with hidden=16.*this run has hidden=1024"):
        _run("mlp", root, results)
    with pytest.raises(ValueError, match="--attentive-preset 'jepa': choose from vjepa, vjepa2, capi, ep"):
        _run("attentive", root, results, preset="jepa")


def test_cog_pl_run_methods_attentive_mlp_writes_and_resumes_their_rows(tmp_path, capsys):
    """``cog-pl run --methods linear attentive mlp --stage probe`` on finished stores (written here): each method's
    rows, the preset and width given on the command line recorded in them; run again, nothing is made again; a
    changed preset is refused in one line before any probe."""
    import hashlib

    import numpy as np

    from cog_pl.cli.main import main
    from cog_pl.features.store import make_meta, write_store

    weights = tmp_path / "weights.pth"
    weights.write_bytes(b"the backbone's weights")
    out = tmp_path / "out"
    plain = write_features(tmp_path / "plain", classes=4, dim=64, per_class=20, test_per_class=5)
    for split in ("train", "test"):
        x, y = np.load(plain / split / "features.npy"), np.load(plain / split / "labels.npy")
        write_store(out / "features" / "r50" / "cog_l1" / split, x, y, None, make_meta(
            model="r50", weights_sha256=hashlib.sha256(weights.read_bytes()).hexdigest(), domain="cog_l1",
            split=split, num_rows=len(y), dim=64, num_classes=4, classes=[f"c{c}" for c in range(4)], transform="t",
            level_file_sha256="0" * 64))
    argv = ["run", "--model", "resnet50", "--checkpoint", str(weights), "--name", "r50", "--in21k-root",
            str(tmp_path), "--domains", "cog_l1", "--seeds", "22", "--shots", "all", "--trials", "2", "--epochs", "2",
            "--probe-device", "cpu", "--probe-precision", "32-true", "--out", str(out), "--stage", "probe",
            "--no-html", "--methods", "linear", "attentive", "mlp", "--attentive-preset", "vjepa", "--mlp-hidden", "16"]
    assert main(argv) == 0
    rows = {r["method"]: r for r in read_rows(out / "results.sqlite")}
    assert set(rows) == {"linear", "attentive", "mlp"}
    assert (rows["attentive"]["preset"], rows["mlp"]["hidden"]) == ("vjepa", 16)
    assert rows["attentive"]["protocol"]["trials"] == 2 and len(rows["mlp"]["trials"]) == 2
    capsys.readouterr()
    assert main(argv) == 0
    assert "(0 new, 3 in all)" in "".join(capsys.readouterr())
    assert main(["report", "--results", str(out / "results.sqlite"), "--out", str(out / "report"), "--no-html"]) == 0
    table = [line.split("|")[2].strip() for line in (out / "report" / "report.md").read_text().splitlines()
             if line.startswith("| r50 |")]
    assert [m for m in table if m in ("linear probe", "attentive probe", "MLP probe")][:3] == [
        "linear probe", "attentive probe", "MLP probe"]  # labelled and ordered from the method table
    assert main([*argv[:-4], "--attentive-preset", "ep"]) == 2
    err = capsys.readouterr().err
    assert "row r50/attentive/cog_l1/shots=all/seed=22 was made with preset=vjepa" in err and "preset=ep" in err
    assert main([*argv[:-4], "--attentive-preset", "jepa"]) == 2
    assert "--attentive-preset 'jepa': choose from vjepa, vjepa2, capi, ep" in capsys.readouterr().err


KILL_SCRIPT = """
import sys
from dataclasses import replace
from cog_pl.evaluate.runner import run_on_stores
from cog_pl.probe.tuner import SearchPlan
from cog_pl.protocol import ProbeProtocol
run_on_stores("attentive", sys.argv[1], sys.argv[2], model="m", domain="cog_l1",
    protocol=replace(ProbeProtocol(), trials=4, epochs=12, batch_size=32), plan=SearchPlan(startup_trials=2,
    trial_batch=2, stale_after=600), seeds=(22, 37), shots=(None, 2), device="cpu")
"""
RESUMED_KEYS = ("shots", "seed", "test_top1", "test_top5", "oracle_test_top1", "lr", "wd", "val_top1", "best_trial",
                "trials", "identity")


def test_a_killed_attentive_grid_resumes_to_the_uninterrupted_rows(tmp_path):
    """A real process running an attentive grid is SIGKILLed once a row is written and another cell claimed; the
    resume takes over the dead process's claim and ends with the rows of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from cog_pl.results import row_key
    from cog_pl.results.claims import claims_path
    from cog_pl.results.identity import format_key

    root = write_features(tmp_path / "feats", classes=4, dim=64, per_class=30, test_per_class=5)
    whole, killed = tmp_path / "whole.sqlite", tmp_path / "killed.sqlite"
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(root), str(killed)], env=env,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)

    def count():
        import sqlite3
        try:
            with sqlite3.connect(claims_path(killed)) as con:
                held = {cell for (cell,) in con.execute("SELECT cell FROM claims")}
            made = read_rows(killed)
            return len(made), len(held - {format_key(row_key(r)) for r in made})  # claimed cells without a row
        except (sqlite3.Error, ValueError):
            return 0, 0

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        rows, held = count()
        if rows >= 1 and held >= 1:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the grid ended before it could be killed"
    before = len(read_rows(killed))
    assert 1 <= before < 4

    exec(compile(KILL_SCRIPT.replace("sys.argv[1], sys.argv[2]", "root, results"), "resume", "exec"),
         {"root": root, "results": killed})
    exec(compile(KILL_SCRIPT.replace("sys.argv[1], sys.argv[2]", "root, results"), "whole", "exec"),
         {"root": root, "results": whole})

    def rows(path):
        return sorted(tuple(str(r[k]) for k in RESUMED_KEYS) for r in read_rows(path))

    assert len(rows(whole)) == 4 and rows(killed) == rows(whole)
    assert count() == (4, 0)


def _token_pair(root, feature, tokens, seed=0, signal_token=2):
    """A pair of token stores of 4 classes whose label is in token ``signal_token`` only: the
    others are noise."""
    import numpy as np

    from cog_pl.features.store import StoreWriter, make_meta

    rng = np.random.default_rng(seed)
    means = rng.normal(size=(4, 64)) * 2
    for split, n in (("train", 20), ("test", 5)):
        y = np.repeat(np.arange(4), n)
        x = rng.normal(size=(len(y), tokens, 64))
        x[:, signal_token] += means[y]
        meta = make_meta(model="m", weights_sha256=None, domain="cog_l1", split=split, num_classes=4,
                         classes=["a", "b", "c", "d"], transform={}, level_file_sha256=None, feature=feature)
        meta["tokens"] = tokens
        writer = StoreWriter(root / split, len(y), 64, identity=meta, tokens=tokens)
        writer.write(np.arange(len(y)), x.astype(np.float16), y)
        writer.finish(meta)
    return root


def test_token_stores_the_attentive_probe_reads_every_token_the_mlp_the_class_token(tmp_path):
    """On a token store the attentive probe reads the tokens and finds the class signal of token 2; the MLP probe
    reads token 0 alone (noise here: chance); a row made on another feature definition is refused."""
    root = _token_pair(tmp_path / "tokens", "tokens2x2", 5)
    results = tmp_path / "rows.sqlite"
    protocol = replace(ProbeProtocol(), trials=2, epochs=20, batch_size=32)
    kwargs = {"model": "m", "domain": "cog_l1", "protocol": protocol, "plan": PLAN, "seeds": (22,), "shots": (None,)}
    attentive = run_on_stores("attentive", root, results, **kwargs)[0]
    mlp = run_on_stores("mlp", root, results, options={"hidden": 16}, **kwargs)[0]
    assert (attentive["feature"], attentive["tokens"], mlp["feature"], mlp["head"]["input"]) == (
        "tokens2x2", 5, "tokens2x2", "class token")
    assert attentive["test_top1"] >= 75.0 and mlp["test_top1"] <= 50.0
    other = _token_pair(tmp_path / "other", "tokens1x1", 2, signal_token=1)
    with pytest.raises(ValueError, match=r"row m/attentive/cog_l1/shots=all/seed=22 was made with "
                                         r"features\.train\.feature=tokens2x2.*this run has features\.train\."
                                         r"feature=tokens1x1"):
        run_on_stores("attentive", other, results, **kwargs)


def test_a_width_the_preset_cannot_split_into_heads_is_refused_before_any_work(tmp_path):
    root = write_features(tmp_path / "feats", classes=4, dim=96, per_class=10, test_per_class=2)
    with pytest.raises(ValueError, match=r"--attentive-preset capi on .*feats \(96 wide\): pooler config: dim 96 does "
                                         r"not split into 1 heads of head_dim 64; the presets that fit 96 channels: "
                                         r"vjepa2"):
        run_on_stores("attentive", root, tmp_path / "rows.sqlite", model="m", domain="cog_l1", protocol=PROTOCOL,
                      plan=PLAN, seeds=(22,), shots=(None,), check_only=True)
    assert not (tmp_path / "rows.sqlite").exists()


@pytest.mark.parametrize("kind", ["attentive", "mlp"])
def test_a_diverging_head_fails_alone_the_others_end_as_without_it(kind):
    """A head at an absurd learning rate (its loss turns non-finite in its first epoch) is scored 0 and recorded as
    diverged, as the linear probe's fast mode does; the bank's other heads end as the bank without it does."""
    torch.manual_seed(0)
    x = torch.randn(40, 3, 64) if kind == "attentive" else torch.randn(40, 64)
    y = torch.randint(0, 4, (40,))
    settings = HeadSettings(kind=kind, preset="capi", hidden=8)

    def bank(seeds, lrs):
        heads = [make_head(settings, 64, 4, s) for s in seeds]
        return train_bank(settings, heads, x, y, lrs, [1e-3] * len(seeds), epochs=3, batch_size=16,
                          generator=torch.Generator().manual_seed(7), evaluate={"val": (x[:20], y[:20]),
                                                                                 "test": (x, y)}, rank_last=True)

    with_bad, without = bank([1, 2, 3], [3e-3, 1e30, 1e-2]), bank([1, 3], [3e-3, 1e-2])
    assert with_bad.diverged_epoch == [None, 0, None] and without.diverged_epoch == [None, None]
    for name in ("val", "test"):
        assert with_bad.top1[name][1] == 0 and with_bad.top5[name][1] == 0
        assert with_bad.top1[name][[0, 2]].tolist() == without.top1[name].tolist()
        assert with_bad.top5[name][[0, 2]].tolist() == without.top5[name].tolist()
    assert (with_bad.ranked[1] == -1).all() and torch.equal(with_bad.ranked[[0, 2]], without.ranked)
    member = (lambda b, i: b.pooler(i)) if kind == "attentive" else (lambda b, i: b.probe(i))
    for mine, theirs in ((0, 0), (2, 1)):
        got, want = member(with_bad.bank, mine).state_dict(), member(without.bank, theirs).state_dict()
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-6, atol=1e-7)
    rolled = member(with_bad.bank, 1).state_dict()  # back to its state before its first epoch: finite, unscored
    assert all(torch.isfinite(v).all() for v in rolled.values())


def test_a_diverged_trial_and_final_head_are_recorded_with_the_linear_probe_s_fields(tmp_path):
    """Every trial and the final head diverge in their first epoch (an absurd lr range): the trials record
    ``diverged_epoch`` 0 and score 0, the row records ``final_diverged_epoch`` 0, test top-1 0 and no predictions;
    a healthy grid's rows record None."""
    from cog_pl.probe.attentive import TokenSplits, probe_cell

    root = write_features(tmp_path / "feats", classes=4, dim=64, per_class=20, test_per_class=3)
    from cog_pl.features.pair import open_pair

    splits = TokenSplits.load(open_pair(root))
    cell = {"seed": 22, "shots": None, "model": "m", "domain": "cog_l1", "protocol": PROTOCOL, "plan": PLAN}
    row = probe_cell(splits, settings=HeadSettings(kind="mlp", hidden=8, lr_range=(1e30, 1e31)), **cell)
    assert [t["diverged_epoch"] for t in row["trials"]] == [0] * PROTOCOL.trials
    assert {t["val_top1"] for t in row["trials"]} == {0.0} and row["val_top1"] == 0.0
    assert row["final_diverged_epoch"] == 0 and row["test_top1"] == 0.0 and row["test_top5"] == 0.0
    healthy = probe_cell(splits, settings=HeadSettings(kind="mlp", hidden=8), **cell)
    assert healthy["final_diverged_epoch"] is None and {t["diverged_epoch"] for t in healthy["trials"]} == {None}


def test_the_heads_honour_the_plan_s_precision_close_to_float32_and_recorded_in_the_row_identity(tmp_path):
    """``bf16-mixed`` (the linear probe's option, bfloat16 autocast: testable on the CPU) trains the heads' forward in
    bfloat16: they end close to float32's but not equal, and the rows are distinct (precision in their identity, so a
    row of the other precision is never reused)."""
    from cog_pl.features.pair import open_pair
    from cog_pl.probe.attentive import TokenSplits, probe_cell
    from cog_pl.results.identity import protocol_differences

    torch.manual_seed(0)
    x, y = torch.randn(40, 3, 64), torch.randint(0, 4, (40,))
    settings = HeadSettings(kind="attentive", preset="capi")
    banks = {p: train_bank(settings, [make_head(settings, 64, 4, 1)], x, y, [3e-3], [1e-3], epochs=3, batch_size=16,
                           generator=torch.Generator().manual_seed(7), evaluate={"test": (x, y)}, precision=p).bank
             for p in ("32-true", "bf16-mixed")}
    with torch.no_grad():
        fp32, bf16 = banks["32-true"](x), banks["bf16-mixed"](x)
    assert not torch.equal(fp32, bf16)
    torch.testing.assert_close(bf16, fp32, rtol=0, atol=0.05 * float(fp32.abs().max()))
    root = write_features(tmp_path / "feats", classes=4, dim=64, per_class=20, test_per_class=3)
    splits = TokenSplits.load(open_pair(root))
    cell = {"seed": 22, "shots": None, "model": "m", "domain": "cog_l1", "protocol": PROTOCOL}
    rows = {p: probe_cell(splits, settings=HeadSettings(kind="mlp", hidden=8), plan=replace(PLAN, precision=p), **cell)
            for p in ("32-true", "bf16-mixed")}
    assert rows["32-true"]["precision"] == "32-true" and rows["bf16-mixed"]["precision"] == "bf16-mixed"
    assert protocol_differences(rows["32-true"], rows["bf16-mixed"]) == [("precision", "32-true", "bf16-mixed")]
    assert abs(rows["32-true"]["val_top1"] - rows["bf16-mixed"]["val_top1"]) <= 10.0
