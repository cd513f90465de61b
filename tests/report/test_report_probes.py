"""The report compares the probe methods (issue 40): top-1 per level of every probe method in the method table's order,
the selection optimism (oracle minus selected) per level and method, ``n/a`` for rows made before rows recorded it,
and a method's gain over the linear probe against concept similarity with paired intervals, from constructed rows and
predictions."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest
from concept_fixtures import level_concepts, write_level_file

from cog_pl import resources
from cog_pl.evaluate import list_methods, method_label
from cog_pl.protocol import DOMAINS, LEVEL_OF_DOMAIN
from cog_pl.report.build import write_report
from cog_pl.report.concepts import concept_report
from cog_pl.results import append_row, read_rows
from cog_pl.results.predictions import Predictions

SEEDS = (22, 37)
N, IMAGES = 8, 6  # concepts per domain, test images per concept
#: The attentive and MLP methods as registered (cog_pl.evaluate.heads): name, label, order.
NAMED = (("attentive", "attentive probe", 5), ("mlp", "MLP probe", 6))


@pytest.fixture(scope="module")
def named_methods():
    """``attentive`` and ``mlp`` in the table with their label and order."""
    assert all(name in list_methods() and method_label(name) == label for name, label, _ in NAMED)


def _top1(rng, base):
    return round(float(base + rng.normal(0, 1.5)), 4)


def _correct(method: str, sim: np.ndarray, seed: int) -> np.ndarray:
    """Which test images of each concept a method gets right: ``(concepts * IMAGES,)``; the attentive probe gains
    more the less similar a concept is to the seen ones."""
    rng = np.random.default_rng([seed, len(method)])
    p = np.clip(0.2 + 0.6 * sim + (0.5 * (1 - sim) if method == "attentive" else 0.0), 0.02, 0.98)
    return rng.random((len(sim), IMAGES)) < p[:, None]


@pytest.fixture(scope="module")
def store(tmp_path_factory, named_methods, onto):
    """Rows of model ``m`` for linear, attentive, MLP and k-NN on the six domains (two seeds), the linear and
    attentive ones with predictions; oracles recorded by all but the MLP (an older row), the attentive probe's on one
    seed only; a level file of the concepts' similarity."""
    import cog_pl.report.concepts as concepts

    was, concepts._ontology = concepts._ontology, lambda: onto  # the report's WordNet look-ups: the session's
    tmp = tmp_path_factory.mktemp("probes")
    sim = write_level_file(tmp / "levels.json", N)
    names = {"in1k": list(resources.in1k_wnids()[:N]),
             **{d: level_concepts(N)[lv] for d, lv in LEVEL_OF_DOMAIN.items()}}
    results, rng, correct = tmp / "results.sqlite", np.random.default_rng(0), {}
    base = {"linear": 60.0, "attentive": 64.0, "mlp": 61.0, "knn": 55.0}
    for method in base:
        for d, domain in enumerate(DOMAINS):
            for seed in SEEDS:
                row = {"model": "m", "method": method, "domain": domain, "shots": None, "seed": seed,
                       "test_top1": _top1(rng, base[method] - 3 * d), "test_top5": 90.0}
                if method in ("linear", "attentive"):
                    s = np.array([sim.get(w, 0.95) for w in names[domain]])
                    right = correct[method, domain, seed] = _correct(method, s, seed)
                    label = np.repeat(np.arange(N), IMAGES)
                    first = np.where(right.ravel(), label, (label + 1) % N)
                    top5 = np.stack([(first + k) % N for k in range(5)], axis=1)
                    row["predictions"] = Predictions.of(top5, label, np.arange(len(label)), names[domain])
                    row["test_top1"] = row["predictions"].top1
                if method == "linear":
                    row.update(oracle_test_top1=row["test_top1"] + 2.0 + seed / 50,
                               selected_test_top1=row["test_top1"] - 0.5)
                elif method == "knn":  # selected: the chosen k's, its test_top1 (no head retrained)
                    row.update(oracle_test_top1=row["test_top1"] + 0.75, selected_test_top1=row["test_top1"])
                elif method == "attentive" and seed == SEEDS[0]:
                    row.update(oracle_test_top1=row["test_top1"] + 1.0, selected_test_top1=row["test_top1"])
                append_row(results, row)
    yield results, tmp / "levels.json", sim, names, correct
    concepts._ontology = was


def _table(text: str, heading: str) -> dict[tuple[str, str], list[str]]:
    section = text.split(heading)[1].split("\n## ")[0]
    lines = [[c.strip() for c in ln.strip("|").split("|")] for ln in section.splitlines() if ln.startswith("| m |")]
    return {(cells[0], cells[1]): cells[2:] for cells in lines}


def test_the_methods_table_shows_each_methods_rows_per_level_in_the_method_tables_order(store, tmp_path):
    results, levels, *_ = store
    text = write_report(results, tmp_path / "r", levels=levels, html=False)["markdown"].read_text()
    heading = next(ln for ln in text.splitlines() if ln.startswith("## ") and " beside " in ln)
    table = _table(text, heading)
    assert [method for _, method in table] == ["linear probe", "attentive probe", "MLP probe", "k-NN"]
    rows = read_rows(results)
    for name in ("linear", "attentive", "mlp", "knn"):
        got = table["m", method_label(name)]
        for domain, value in zip(DOMAINS, got, strict=True):
            v = [r["test_top1"] for r in rows if r["method"] == name and r["domain"] == domain]
            assert value == f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}"


def test_the_selection_optimism_is_the_oracle_minus_the_selected_per_level_and_method(store, tmp_path):
    """Linear: oracle minus the selected trial's (not the retrained probe's test_top1); k-NN: minus its test_top1;
    the attentive probe's on the one seed recording it (n = 1); the MLP's rows, made before, n/a; results.csv too."""
    results, levels, *_ = store
    files = write_report(results, tmp_path / "r", levels=levels, html=False)
    table = _table(files["markdown"].read_text(), "## Selection optimism")
    rows = read_rows(results)
    for domain, i in zip(DOMAINS, range(6)):
        gaps = [r["oracle_test_top1"] - r["selected_test_top1"] for r in rows
                if r["method"] == "linear" and r["domain"] == domain]
        assert gaps == pytest.approx([2.94, 3.24]) and table["m", "linear probe"][i] == "+3.09 ± 0.21"
        assert table["m", "k-NN"][i] == "+0.75 ± 0.00"
        assert table["m", "attentive probe"][i] == "+1.00 (n = 1)"
        assert table["m", "MLP probe"][i] == "n/a"
    lines = {(r["method"], r["domain"]): r for r in csv.DictReader(io.StringIO(files["csv"].read_text()))}
    assert float(lines["linear", "cog_l3"]["selection_gap_mean"]) == pytest.approx(3.09)
    want = np.mean([r["oracle_test_top1"] for r in rows if r["method"] == "linear" and r["domain"] == "cog_l3"])
    assert float(lines["linear", "cog_l3"]["oracle_top1_mean"]) == pytest.approx(want, abs=1e-4)
    assert lines["attentive", "in1k"]["selection_gap_seeds"] == "1"
    assert (lines["mlp", "cog_l5"]["selection_gap_mean"], lines["mlp", "cog_l5"]["selection_gap_seeds"]) == ("", "0")


def test_rows_made_before_the_oracle_was_recorded_show_n_a(tmp_path):
    results = tmp_path / "old.sqlite"
    for domain in DOMAINS:
        for seed in SEEDS:
            append_row(results, {"model": "old", "domain": domain, "shots": None, "seed": seed,
                                 "test_top1": 50.0 + seed / 10, "test_top5": 80.0})
    files = write_report(results, tmp_path / "r", html=False)
    section = files["markdown"].read_text().split("## Selection optimism")[1].split("\n## ")[0]
    assert "| old | linear probe | n/a | n/a | n/a | n/a | n/a | n/a |" in section
    assert {r["selection_gap_mean"] for r in csv.DictReader(io.StringIO(files["csv"].read_text()))} == {""}


def test_the_attentive_gain_against_similarity_is_the_constructed_concepts_difference(store, tmp_path):
    """Per level the paired gain equals the constructed answers' difference, inside its interval; per concept the
    difference against similarity: each bin's mean and the slope recomputed here; the section and the figure."""
    results, levels, sim, names, correct = store
    report = concept_report(results, read_rows(results), levels=levels)
    assert list(report.gains) == ["attentive"]  # the MLP and k-NN rows have no predictions
    gain = report.gains["attentive"]
    for domain in DOMAINS:
        p = gain.paired["m", domain]
        want = 100 * np.mean([correct["attentive", domain, s].mean() - correct["linear", domain, s].mean()
                              for s in SEEDS])
        assert p.difference == pytest.approx(want) and p.low <= p.difference <= p.high
        assert (p.images, p.seeds) == (N * IMAGES, SEEDS)
    points = [(sim[w], 100 * np.mean([correct["attentive", d, s][i].mean() - correct["linear", d, s][i].mean()
                                      for s in SEEDS]))
              for d in LEVEL_OF_DOMAIN for i, w in enumerate(names[d])]
    x, y = np.array(points).T
    curve = gain.curves["m"]
    for b in range(len(curve.edges) - 1):
        inside = (x >= curve.edges[b]) & ((x < curve.edges[b + 1]) | (b == len(curve.edges) - 2))
        assert curve.concepts[b] == inside.sum() and curve.mean[b] == pytest.approx(y[inside].mean())
        assert curve.low[b] <= curve.mean[b] <= curve.high[b]
    assert gain.slopes["m"][0] == pytest.approx(np.polyfit(x, y, 1)[0] * 0.1)
    assert gain.slopes["m"][0] < 0 and gain.concepts["m"] == 5 * N  # the gain grows as similarity falls
    files = write_report(results, tmp_path / "r", levels=levels, html=True)
    text = files["markdown"].read_text()
    section = text.split("## attentive probe against the linear probe")[1].split("\n## ")[0]
    assert f"| m | L5 | {gain.paired['m', 'cog_l5'].difference:+.2f} | [" in section
    assert "| similarity | concepts | m |" in section and "probe_gains.png" in section
    assert files["probe_gains"].read_bytes()[:4] == b"\x89PNG"
    assert 'alt="probe_gains"' in files["html"].read_text()


def test_a_head_trained_on_images_is_set_beside_the_probes_and_fine_tuning_is_not(tmp_path):
    """``attentive_images`` (chosen by a flag, like fine-tuning, but on the frozen backbone) is in the methods table
    beside the linear probe; fine-tuning keeps its own section."""
    from cog_pl.evaluate import is_frozen, is_probe

    assert (is_probe("attentive_images"), is_frozen("attentive_images")) == (False, True)
    assert (is_probe("finetune"), is_frozen("finetune")) == (False, False)
    results = tmp_path / "r.sqlite"
    top1 = {"linear": 50.0, "attentive_images": 55.0, "finetune": 60.0}
    for method, value in top1.items():
        for domain in DOMAINS:
            append_row(results, {"model": "m", "method": method, "domain": domain, "shots": None, "seed": 22,
                                 "test_top1": value, "test_top5": 80.0})
    text = write_report(results, tmp_path / "out", html=False)["markdown"].read_text()
    heading = next(ln for ln in text.splitlines() if ln.startswith("## ") and " beside " in ln)
    table = _table(text, heading)
    assert list(table) == [("m", "linear probe"), ("m", "attentive probe (images, augmented)")]
    assert table["m", "attentive probe (images, augmented)"] == ["55.00 (n = 1)"] * len(DOMAINS)  # 1 of 5 seeds


# -- pairing by weights, whatever the label (issue 46) ------------------------------------------------------------

W, V = "a1" * 32, "b2" * 32  # two sets of weights
SPLIT = "c3" * 32


def _features(weights: str, split: str = SPLIT, definition: str = "penultimate") -> dict:
    """A row's features identity as features_identity records it (the keys that matter here)."""
    return {s: {"model": "x", "weights_sha256": weights, "split_sha256": split, "definition": definition}
            for s in ("train", "test")}


def _append(results, model, method, domain, seed, right, classes, **fields):
    """A row whose predictions get ``right`` (per concept and image) right, the rest taken for the next concept."""
    label = np.repeat(np.arange(len(classes)), IMAGES)
    first = np.where(right.ravel(), label, (label + 1) % len(classes))
    preds = Predictions.of(np.stack([(first + k) % len(classes) for k in range(5)], axis=1), label,
                           np.arange(len(label)), classes)
    append_row(results, {"model": model, "method": method, "domain": domain, "shots": None, "seed": seed,
                         "test_top1": preds.top1, "test_top5": 90.0, "predictions": preds, **fields})


@pytest.fixture(scope="module")
def labels(tmp_path_factory, named_methods, onto):
    """The linear probe under ``m`` (weights W), the attentive and MLP probes under ``m+tokens2x2`` (W, another
    feature definition), an attentive probe on images under ``m-img`` (W as its checkpoint digest), and an attentive
    probe under ``n`` (weights V): every row with predictions, two seeds, the six domains."""
    import cog_pl.report.concepts as concepts

    was, concepts._ontology = concepts._ontology, lambda: onto
    tmp = tmp_path_factory.mktemp("labels")
    sim = write_level_file(tmp / "levels.json", N)
    names = {"in1k": list(resources.in1k_wnids()[:N]),
             **{d: level_concepts(N)[lv] for d, lv in LEVEL_OF_DOMAIN.items()}}
    results, correct = tmp / "results.sqlite", {}
    made = {("m", "linear"): {"features": _features(W)},
            ("m+tokens2x2", "attentive"): {"features": _features(W, definition="tokens2x2")},
            ("m+tokens2x2", "mlp"): {"features": _features(W, definition="tokens2x2")},
            ("m-img", "attentive_images"): {"features": "on-the-fly", "attentive_images": {"checkpoint_sha256": W}},
            ("n", "attentive"): {"features": _features(V)}}
    for (model, method), fields in made.items():
        for domain in DOMAINS:
            s = np.array([sim.get(w, 0.95) for w in names[domain]])
            for seed in SEEDS:
                right = correct[model, method, domain, seed] = _correct(method, s, seed + len(model))
                _append(results, model, method, domain, seed, right, names[domain], **fields)
    yield results, tmp / "levels.json", correct
    concepts._ontology = was


def test_a_method_is_set_against_the_linear_probe_of_the_same_weights_whatever_its_label(labels, tmp_path):
    """The token label's attentive and MLP rows and the image-trained attentive rows (a checkpoint digest, no
    features identity) are paired with ``m``'s linear probe per level, their gain the constructed difference inside
    its interval; the rows of other weights are not paired, and say why."""
    results, levels, correct = labels
    report = concept_report(results, read_rows(results), levels=levels)
    assert list(report.gains) == ["attentive", "mlp", "attentive_images"]  # the method table's order
    for method, model in (("attentive", "m+tokens2x2"), ("mlp", "m+tokens2x2"), ("attentive_images", "m-img")):
        gain = report.gains[method]
        for domain in DOMAINS:
            p = gain.paired[model, domain]
            want = 100 * np.mean([correct[model, method, domain, s].mean() - correct["m", "linear", domain, s].mean()
                                  for s in SEEDS])
            assert p.difference == pytest.approx(want) and p.low <= p.difference <= p.high
            assert (p.images, p.seeds, gain.against[model, domain]) == (N * IMAGES, SEEDS, "m")
        assert gain.curves[model].concepts.sum() == 5 * N  # the concepts of L1..L5 against their similarity
    other = report.gains["attentive"]
    assert {d for (m, d) in other.unpaired if m == "n"} == set(DOMAINS) and not any(m == "n" for m, _ in other.paired)
    assert other.unpaired["n", "cog_l1"] == f"no linear-probe predictions of the same weights (sha256 {V[:12]}) on " \
                                           "this test split"
    files = write_report(results, tmp_path / "r", levels=levels, html=False)
    text = files["markdown"].read_text()
    section = text.split("## MLP probe against the linear probe")[1].split("\n## ")[0]
    p = report.gains["mlp"].paired["m+tokens2x2", "cog_l4"]
    assert f"| m+tokens2x2 | m | L4 | {p.difference:+.2f} | [{p.low:+.2f}, {p.high:+.2f}]" in section
    assert "no linear-probe predictions" not in section and files["probe_gains"].read_bytes()[:4] == b"\x89PNG"
    assert "## Paired differences" not in text  # no baseline; and the token label is never a linear model


def test_a_test_split_of_other_images_or_several_labels_of_the_same_weights(labels, tmp_path):
    """A linear probe of the same weights on another test split is no partner; where two labels of the same weights
    have linear probes, the method is set against each, named by both."""
    results, _, _ = labels
    rows = read_rows(results)
    moved = [{**r, "model": "m-other", "features": _features(W, split="d4" * 32)} for r in rows
             if r["model"] == "m"]
    copied = [{**r, "model": "m-copy"} for r in rows if r["model"] == "m"]
    from cog_pl.report.concepts import stored_predictions
    from cog_pl.report.probes import probe_gains

    stored, _ = stored_predictions(results, rows)
    for extra in (moved, copied):
        for r in extra:
            stored[r["model"], "linear", r["domain"]] = stored["m", "linear", r["domain"]]
    gains = probe_gains(stored, None, rows=[*rows, *moved])
    assert {k for k in gains["attentive"].paired if k[1] == "cog_l2"} == {("m+tokens2x2", "cog_l2")}
    gains = probe_gains(stored, None, rows=[*rows, *copied])
    both = {(k, gains["attentive"].against[k]) for k in gains["attentive"].paired if k[1] == "cog_l2"}
    assert both == {(("m+tokens2x2 (against m)", "cog_l2"), "m"), (("m+tokens2x2 (against m-copy)", "cog_l2"),
                                                                    "m-copy")}


def _stores(root, label: str, domain: str, classes: list[str], tokens: int | None, rng) -> None:
    """A train/test pair of ``label`` on ``domain`` as extraction writes it (weights W, one test split): class clusters,
    vectors or ``tokens`` tokens per image (the class token first)."""
    from cog_pl.features.store import make_meta, write_store

    means = np.random.default_rng(len(domain)).normal(size=(len(classes), 64))  # CAPI's preset: D / 64 heads
    for split, n in (("train", 12), ("test", IMAGES)):
        y = np.repeat(np.arange(len(classes)), n)
        x = np.maximum(means[y] + 1.5 * rng.normal(size=(len(y), 64)), 0)
        if tokens:
            x = np.stack([x + 0.3 * rng.normal(size=x.shape) for _ in range(tokens)], axis=1)
        meta = make_meta(model=label, arch="external:demo_cnn", weights="demo.pt", weights_sha256=W,
                         trusted_checkpoint=False, precision="32-true", domain=domain, split=split, num_rows=len(y),
                         dim=64, num_classes=len(classes), classes=classes, transform={"crop": 32},
                         level_file_sha256=None, split_sha256=SPLIT, feature="tokens2x2" if tokens else "penultimate")
        write_store(root / label / domain / split, x, y, np.arange(len(y)) + 1000 * (split == "test"), meta)


def test_every_tuned_methods_optimism_is_never_negative_and_the_token_probes_gain_on_each_level(tmp_path):
    """Real grids: the linear probe and k-NN on a label's vector stores, the attentive and MLP probes on the token
    stores of the same weights under ``<label>+tokens2x2``; every tuned row records the selected result and its
    oracle, the optimism per level is oracle − selected (>= 0) for every method, and the report sets the attentive and
    MLP probes against that linear probe on every level with an interval."""
    from dataclasses import replace

    from cog_pl.evaluate.runner import run_on_stores
    from cog_pl.probe.tuner import SearchPlan
    from cog_pl.protocol import ProbeProtocol
    from cog_pl.report.tables import selection_gap

    rng, features, results = np.random.default_rng(0), tmp_path / "features", tmp_path / "results.sqlite"
    domains = ("cog_l1", "cog_l2")
    grid = {"protocol": replace(ProbeProtocol(), trials=4, epochs=3, batch_size=16), "seeds": SEEDS,
            "plan": SearchPlan(startup_trials=2, trial_batch=2, precision="32-true"), "shots": (None,),
            "device": "cpu", "storage": str(tmp_path / "studies.db")}
    for domain in domains:
        classes = level_concepts(4)[LEVEL_OF_DOMAIN[domain]]
        _stores(features, "m", domain, classes, None, rng)
        _stores(features, "m+tokens2x2", domain, classes, 5, rng)
        for label, method, extra in (("m", "linear", {}), ("m", "knn", {}), ("m+tokens2x2", "attentive", {}),
                                     ("m+tokens2x2", "mlp", {"hidden": 16})):
            run_on_stores(method, features / label / domain, results, model=label, domain=domain, options=extra or None,
                          **grid)
    rows = read_rows(results)
    assert len(rows) == 4 * len(domains) * len(SEEDS)
    for row in rows:
        assert row["selected_test_top1"] <= row["oracle_test_top1"], row["method"]
        assert selection_gap(row) == pytest.approx(row["oracle_test_top1"] - row["selected_test_top1"])
        assert selection_gap(row) >= 0
    files = write_report(results, tmp_path / "r", html=False)
    text = files["markdown"].read_text()
    table = _table(text, "## Selection optimism")
    for method in ("linear probe", "k-NN"):
        assert all(v.startswith("+") for v in table["m", method]), table
    lines = {(c[0], c[1]): c[2:] for c in ([x.strip() for x in ln.strip("|").split("|")] for ln in
                                           text.split("## Selection optimism")[1].split("\n## ")[0].splitlines()
                                           if ln.startswith("| m+tokens2x2 |"))}
    for method in ("attentive probe", "MLP probe"):
        assert len(lines["m+tokens2x2", method]) == len(domains) and all(v.startswith("+") for v in
                                                                         lines["m+tokens2x2", method])
    for name in ("attentive probe", "MLP probe"):
        section = text.split(f"## {name} against the linear probe")[1].split("\n## ")[0]
        for level in ("L1", "L2"):
            assert re.search(rf"\| m\+tokens2x2 \| m \| {level} \| [+-]\d+\.\d\d \| \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\]",
                             section), section
    gaps = [float(r["selection_gap_mean"]) for r in csv.DictReader(io.StringIO(files["csv"].read_text()))]
    assert len(gaps) == 4 * len(domains) and min(gaps) >= 0
