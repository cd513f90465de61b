"""A probe method added by a user's package, through the public API only: nearest class mean, registered with
``cog_pl.register_probe_method`` in a module an installed package names under the entry point group
``cog_pl.probe_methods``. ``cog-pl run --methods`` lists it, ``cog-pl run --methods linear ncm`` writes its rows
beside the linear probe's and skips them when run again, and the report orders and labels them from the table."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
from bad_input_cases import COG_PL
from test_probe_fixtures import write_features

from cog_pl.features.store import make_meta, open_store, write_store
from cog_pl.results import read_rows, row_times

REPO = Path(__file__).resolve().parents[2]

#: The user's module: a few lines of numpy over the public face (register_probe_method, open_store, the results API).
PLUGIN = '''
import numpy as np

import cog_pl
from cog_pl.results import append_row, has_row, row_key


def _unit(a):
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


@cog_pl.register_probe_method("ncm", label="nearest class mean", order=30,
                              description="cosine to each class's mean train feature")
def ncm(root, results, *, model, domain, seeds, shots, overwrite=False, **_):
    train, test = (cog_pl.open_store(f"{root}/{split}") for split in ("train", "test"))
    x, y = np.asarray(train.features, np.float64), np.asarray(train.labels)
    written = []
    for n in shots:
        for seed in seeds:
            row = {"model": model, "method": "ncm", "domain": domain, "shots": n, "seed": seed}
            if not overwrite and has_row(results, row_key(row)):
                continue  # resumed: a row made is not made again
            rng = np.random.default_rng(seed)
            idx = np.arange(len(y)) if n is None else np.concatenate(
                [rng.permutation(np.flatnonzero(y == c))[:n] for c in np.unique(y)])
            classes = np.unique(y[idx])
            means = np.stack([x[idx][y[idx] == c].mean(0) for c in classes])
            ranked = classes[np.argsort(-(_unit(np.asarray(test.features, np.float64)) @ _unit(means).T), axis=1)]
            labels = np.asarray(test.labels)[:, None]
            row.update(test_top1=100.0 * float((ranked[:, :1] == labels).any(1).mean()),
                       test_top5=100.0 * float((ranked[:, :5] == labels).any(1).mean()))
            append_row(results, row)
            written.append(row)
    return written
'''


def _plugin(site: Path) -> None:
    """``ncm_plugin`` installed into ``site`` as a package would be: the module and a dist-info naming it."""
    site.mkdir(parents=True)
    (site / "ncm_plugin.py").write_text(PLUGIN)
    info = site / "ncm_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ncm-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[cog_pl.probe_methods]\nncm = ncm_plugin\n")


#: The stores' weights: a file's bytes, given to the run as its checkpoint (one label names one set of weights).
WEIGHTS = b"the backbone's weights"
WEIGHTS_SHA256 = hashlib.sha256(WEIGHTS).hexdigest()


def _stores(out: Path, model: str, domains: tuple[str, ...]) -> None:
    """Finished feature stores of ``model`` on ``domains``: 4 Gaussian classes each."""
    for i, domain in enumerate(domains):
        plain = write_features(out / "plain" / domain, classes=4, dim=8, per_class=25, test_per_class=6, seed=i)
        for split in ("train", "test"):
            x, y = np.load(plain / split / "features.npy"), np.load(plain / split / "labels.npy")
            write_store(out / "features" / model / domain / split, x, y, None, make_meta(
                model=model, weights_sha256=WEIGHTS_SHA256, domain=domain, split=split, num_rows=len(y), dim=x.shape[1],
                num_classes=4, classes=[f"c{c}" for c in range(4)], transform="t", level_file_sha256="0" * 64))
            assert open_store(out / "features" / model / domain / split).meta["model"] == model


def _cog_pl(site: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([str(COG_PL), *argv], capture_output=True, text=True, timeout=600, env=env)


def test_a_probe_method_of_an_installed_package_is_listed_run_resumed_and_reported(tmp_path):
    site, out = tmp_path / "site", tmp_path / "out"
    _plugin(site)
    listed = _cog_pl(site, "run", "--methods")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.startswith("  ")]
    # by order: the probes, then fine-tuning
    assert names == ["linear", "linear_text_init", "zeroshot", "attentive", "mlp", "knn", "ncm", "finetune",
                     "attentive_images"], listed.stdout
    assert f"  ncm{' ' * 15}nearest class mean: cosine to each class's mean train feature" in listed.stdout
    assert "linear, linear_text_init, zeroshot, attentive, mlp, knn, ncm" in " ".join(
        _cog_pl(site, "run", "--help").stdout.split())

    domains = ("cog_l1", "cog_l2")
    _stores(out, "r50", domains)
    (tmp_path / "weights.pth").write_bytes(WEIGHTS)
    argv = ["run", "--model", "resnet50", "--checkpoint", str(tmp_path / "weights.pth"), "--name", "r50",
            "--in21k-root", str(tmp_path), "--domains", *domains, "--seeds", "22",
            "--shots", "all", "2", "--trials", "2", "--epochs", "2", "--probe-device", "cpu", "--probe-precision",
            "32-true", "--out", str(out), "--methods", "linear", "ncm", "--stage", "probe"]
    first = _cog_pl(site, *argv)
    assert first.returncode == 0, first.stderr
    rows = read_rows(out / "results.sqlite")
    assert sorted((r["method"], r["domain"], r["shots"] or 0) for r in rows) == sorted(
        (m, d, s) for m in ("linear", "ncm") for d in domains for s in (0, 2))
    assert all(0.0 <= r["test_top1"] <= r["test_top5"] == 100.0 for r in rows if r["method"] == "ncm")  # 4 classes
    assert all(r["test_top1"] > 25.0 for r in rows if r["method"] == "ncm" and r["shots"] is None)  # above chance
    times = row_times(out / "results.sqlite")

    again = _cog_pl(site, *argv)  # resumed: every row of both methods is skipped, none made again
    assert again.returncode == 0, again.stderr
    assert "(0 new, 8 in all)" in again.stdout + again.stderr
    assert row_times(out / "results.sqlite") == times

    report = _cog_pl(site, "report", "--results", str(out / "results.sqlite"), "--out", str(out / "report"))
    assert report.returncode == 0, report.stderr
    text = (out / "report" / "report.md").read_text()
    assert "## nearest class mean beside linear probe: test top-1 (%) on all data" in text
    lines = [line for line in text.splitlines() if line.startswith("| r50 |")]
    methods = [line.split("|")[2].strip() for line in lines if line.split("|")[2].strip() in (
        "linear probe", "nearest class mean")]
    assert methods[:2] == ["linear probe", "nearest class mean"]  # the table's order: the linear probe first
    assert "| r50 (nearest class mean) |" in text  # its few-shot rows, labelled
    page = (out / "report" / "report.html").read_text()
    assert "nearest class mean beside linear probe" in page and "<td>nearest class mean</td>" in page


def test_a_registered_method_s_rows_are_any_method_s_rows_to_the_store(tmp_path):
    """The store keeps no list of methods: a row of a method registered nowhere here (a plugin not installed) is
    kept, read and reported under its own name, after the registered methods."""
    from cog_pl.report.build import write_report
    from cog_pl.results import append_row

    for method, top1 in (("zeta", 40.0), ("linear", 60.0)):
        for domain in ("in1k", "cog_l1"):
            append_row(tmp_path / "r.sqlite", {"model": "m", "method": method, "domain": domain, "shots": None,
                                               "seed": 22, "test_top1": top1, "test_top5": 90.0})
    assert {r["method"] for r in read_rows(tmp_path / "r.sqlite")} == {"zeta", "linear"}
    text = write_report(tmp_path / "r.sqlite", tmp_path / "report", html=False)["markdown"].read_text()
    assert "## zeta beside linear probe" in text
    assert text.index("| m | linear probe |") < text.index("| m | zeta |")

