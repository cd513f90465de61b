"""A method added in one file, outside the package: nearest class mean, a :class:`cog_pl.Method` with an options
dataclass, in a module an installed package names under the entry point group ``cog_pl.probe_methods``. Nothing
else is written for it: ``cog-pl run --methods`` lists it with its options, ``cog-pl run --help`` shows its flag,
``cog-pl run --methods linear ncm --ncm-metric euclidean`` writes its rows beside the linear probe's, skips them when
run again and refuses them, naming the option, when run with another metric, and the report orders and labels them
from the table. docs/development.md shows the same module."""

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

#: The user's module: a few lines of numpy over the public face (Method, register_method) and the stores' identity.
PLUGIN = '''
from dataclasses import dataclass, field

import numpy as np

import cog_pl
from cog_pl.data.sampling import final_indices
from cog_pl.errors import CogError
from cog_pl.results.identity import features_identity


@dataclass(frozen=True)
class NCMOptions:
    """How a test feature is compared with the class means."""

    metric: str = field(default="cosine", metadata={"help": "cosine or euclidean"})

    def __post_init__(self):
        if self.metric not in ("cosine", "euclidean"):
            raise CogError(f"--ncm-metric {self.metric!r}: choose cosine or euclidean")


class NCM(cog_pl.Method):
    """Each test feature goes to the class of the nearest mean train feature of the cell's sample."""

    name = "ncm"
    label = "nearest class mean"
    order = 30
    description = "each test feature goes to the class of the nearest mean train feature"
    options = NCMOptions

    def identity(self, job, pair):  # what the rows' numbers depend on: a row of other values is refused
        return {"features": features_identity(pair), "ncm": {"metric": job.options.metric}}

    def run_cell(self, job, pair, cell, want):  # one (shots, seed) cell's numbers; the runner writes the row
        shots, seed = cell
        x, y = np.asarray(pair.train.features, np.float64), np.asarray(pair.train.labels)
        rows = np.arange(len(y)) if shots is None else final_indices(y, seed, shots)
        classes = np.unique(y[rows])
        means = np.stack([x[rows][y[rows] == c].mean(0) for c in classes])
        test = np.asarray(pair.test.features, np.float64)
        if job.options.metric == "cosine":
            unit = lambda a: a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
            score = unit(test) @ unit(means).T
        else:
            score = -((test[:, None, :] - means[None]) ** 2).sum(-1)
        ranked = classes[np.argsort(-score, axis=1)]
        labels = np.asarray(pair.test.labels)[:, None]
        return {"test_top1": 100.0 * float((ranked[:, :1] == labels).any(1).mean()),
                "test_top5": 100.0 * float((ranked[:, :5] == labels).any(1).mean())}


cog_pl.register_method(NCM())
'''


def test_the_developer_docs_quote_this_module_unchanged():
    """docs/development.md's worked example is this module, as it runs here."""
    text = (REPO / "docs" / "development.md").read_text()
    section = text[text.index("## Adding an evaluation method"):]
    quoted = section[section.index("```python\n") + len("```python\n"):]
    assert quoted[:quoted.index("```")].strip("\n") == PLUGIN.strip("\n")


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
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.startswith("  ") and
             line.split()[0] != "options:"]
    # by order: the probes, then fine-tuning
    assert names == ["linear", "linear_text_init", "zeroshot", "attentive", "mlp", "finetune", "attentive_images",
                     "ridge", "knn", "ncm"], listed.stdout
    assert (f"  ncm{' ' * 15}nearest class mean: each test feature goes to the class of the nearest mean train "
            f"feature\n  {' ' * 16}  options: --ncm-metric") in listed.stdout
    helped = " ".join(_cog_pl(site, "run", "--help").stdout.split())
    assert "linear, linear_text_init, zeroshot, attentive, mlp, finetune, attentive_images, ridge, knn, ncm" in helped
    assert "--ncm-metric NCM_METRIC cosine or euclidean (default: cosine)" in helped

    domains = ("cog_l1", "cog_l2")
    _stores(out, "r50", domains)
    (tmp_path / "weights.pth").write_bytes(WEIGHTS)
    argv = ["run", "--model", "resnet50", "--checkpoint", str(tmp_path / "weights.pth"), "--name", "r50",
            "--in21k-root", str(tmp_path), "--domains", *domains, "--seeds", "22",
            "--shots", "all", "2", "--trials", "2", "--epochs", "2", "--probe-device", "cpu", "--probe-precision",
            "32-true", "--out", str(out), "--methods", "linear", "ncm", "--stage", "probe", "--ncm-metric", "euclidean"]
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
    assert {r["ncm"]["metric"] for r in rows if r["method"] == "ncm"} == {"euclidean"}
    other = _cog_pl(site, *argv[:-1], "cosine")
    assert other.returncode == 2 and other.stderr.strip().splitlines()[-1].endswith(
        "row r50/ncm/cog_l1/shots=all/seed=22 was made with metric=euclidean, this run has metric=cosine; pass "
        "--overwrite to replace it")
    bad = _cog_pl(site, *argv[:-1], "manhattan")
    assert bad.returncode == 2 and "--ncm-metric 'manhattan': choose cosine or euclidean" in bad.stderr

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

