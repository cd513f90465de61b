"""A catalogue of bad inputs a user (or an attacker) gives ``cog-pl``, each run through the installed command.

One table for the test (tests/cli/test_bad_inputs.py) and the benchmark (benchmarks/bad_inputs.py). A case is a command
line with ``{placeholders}`` for the small files :func:`make_data` generates, and the text its error must name (the
file, option, URL or synset). A clear error: exit status other than 0, no traceback, the last stderr line is
``cog-pl ...: error: ...`` and names the thing, within the case's time limit.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bad_input_data import IN1K_WNID, L1_PAIR, L1_WNID, NO_WNID, make_data  # noqa: F401 - re-exported

#: The console script installed beside this Python (as tests/test_docs_commands.py finds it).
COG_PL = Path(sys.executable).with_name("cog-pl")
ERROR_LINE = re.compile(r"^cog-pl( [\w-]+)*: error: ")


@dataclass(frozen=True)
class Case:
    """One bad input: ``args`` after ``cog-pl`` and the text (``names``) the error must contain, both formatted
    with :func:`make_data`'s paths; ``owner``: whose defect of issue 17 it is; ``unix_permissions``: needs file
    permissions to hold (skipped as root); ``absent``: glob patterns (formatted likewise) that must match nothing
    after the refusal: no row, store or study written; ``env``: formatted likewise."""

    name: str
    args: tuple[str, ...]
    names: str
    owner: str = "E"
    unix_permissions: bool = False
    timeout: float = 180.0
    slow: bool = False
    env: dict[str, str] = field(default_factory=dict)
    absent: tuple[str, ...] = ()

    def argv(self, data: dict[str, str]) -> list[str]:
        return [a.format(**data) for a in self.args]

    def written(self, data: dict[str, str]) -> list[str]:
        """What the command left where :attr:`absent` wants nothing (a results store, a study, a feature store)."""
        import glob

        return [p for pattern in self.absent for p in glob.glob(pattern.format(**data))]


@dataclass(frozen=True)
class Outcome:
    returncode: int | None  # None: killed at the time limit
    stderr: str
    seconds: float

    @property
    def last_line(self) -> str:
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        return lines[-1] if lines else ""

    @property
    def one_line(self) -> bool:
        return "Traceback" not in self.stderr and bool(ERROR_LINE.match(self.last_line))

    def names(self, case: Case, data: dict[str, str]) -> bool:
        return case.names.format(**data) in self.last_line

    def clear(self, case: Case, data: dict[str, str]) -> bool:
        return self.returncode not in (0, None) and self.one_line and self.names(case, data)


def run_case(case: Case, data: dict[str, str], cwd: str | os.PathLike) -> Outcome:
    """Run one case as a process; its stderr and exit status (None when it ran past its limit)."""
    env = {k: v for k, v in os.environ.items() if k != "COG_PL_DEBUG"}
    env.update({"HF_HUB_OFFLINE": "1", "COG_PL_CACHE": data["cache"],
                **{k: v.format(**data) for k, v in case.env.items()}})
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([str(COG_PL), *case.argv(data)], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=case.timeout, stdin=subprocess.DEVNULL)
        code, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = None, (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
    return Outcome(code, err, time.perf_counter() - t0)


P = ("--probe-device", "cpu", "--trials", "1", "--epochs", "1", "--workdir", "{root}/w")  # a quick probe's options
RES = ("--model", "m", "--domain", "cog_l2", "--results", "{root}/r.sqlite")
X = ("--model.model", "timm:resnet10t", "--model.random_weights", "true", "--data.out", "{root}/xout",
     "--data.num_workers", "0", "--trainer.accelerator", "cpu")


def _cell(tag: str, knn: bool = False) -> tuple[str, ...]:
    """A quick probe's options with a study folder and a results store of its own (``absent``: :func:`_none`)."""
    study = () if knn else ("--trials", "1", "--epochs", "1", "--workdir", f"{{root}}/w-{tag}")
    return ("--probe-device", "cpu", *study, "--results", f"{{root}}/r-{tag}.sqlite")


def _none(tag: str) -> tuple[str, ...]:
    """Where :func:`_cell`'s study and results would be: nothing there after a refusal."""
    return f"{{root}}/w-{tag}", f"{{root}}/r-{tag}.sqlite"


XO = ("--model.model", "timm:resnet10t", "--model.random_weights", "true", "--data.num_workers", "0",
      "--trainer.accelerator", "cpu")

CASES: tuple[Case, ...] = (
    # wordnet and similarity
    Case("wordnet install from a missing source", ("wordnet", "install", "--data-dir", "{root}/nltk", "--from",
                                                   "{missing}"), "{missing}", slow=True),
    Case("similarity of an unknown wnid", ("similarity", NO_WNID, IN1K_WNID), NO_WNID, slow=True),
    Case("similarity of a malformed wnid", ("similarity", "cat", IN1K_WNID), "'cat'", slow=True),
    # level files
    Case("data split export: a shard sample without cls", ("data", "split", "export", "--level", "L1",
                                                             "--in21k-root", "{wds_nocls}", "--out", "{root}/s.gz"),
         "{wds_nocls_shard}: sample k1 has no cls member"),
    Case("data split export: a truncated shard", ("data", "split", "export", "--level", "L1", "--in21k-root",
                                                   "{wds_cut}", "--out", "{root}/s.gz"), "{wds_cut_shard}: truncated"),
    Case("levels show: missing file", ("levels", "show", "{missing}"), "{missing}"),
    Case("levels show: not JSON", ("levels", "show", "{lv_notjson}"), "{lv_notjson}"),
    Case("levels show: a JSON string", ("levels", "show", "{lv_string}"), "{lv_string}"),
    Case("levels show: a JSON list", ("levels", "show", "{lv_list}"), "{lv_list}"),
    Case("levels show: version null", ("levels", "show", "{lv_vnull}"), "version None"),
    Case("levels show: version a string", ("levels", "show", "{lv_vstr}"), "{lv_vstr}"),
    Case("levels show: an integer level", ("levels", "show", "{lv_int}"), "level L1"),
    Case("levels show: a string level", ("levels", "show", "{lv_str}"), "level L2"),
    Case("levels show: unknown wnid", ("levels", "show", "{lv_unknown}"), NO_WNID),
    Case("levels show: not a wnid", ("levels", "show", "{lv_bad}"), "'cat'"),
    Case("levels show: a wnid in two levels", ("levels", "show", "{lv_dup}"), L1_WNID),
    Case("levels compare: unreadable file", ("levels", "compare", "{lv_locked}"), "{lv_locked}",
         unix_permissions=True),
    Case("levels plot: output in a missing folder", ("levels", "plot", "{lv_int}", "--out", "{missing}/p.png"),
         "{lv_int}"),
    Case("levels build: negative --min-images", ("levels", "build", "--out", "{root}/l.json", "--min-images", "-5"),
         "--min-images"),
    Case("levels build: missing discard list", ("levels", "build", "--out", "{root}/l.json", "--discard",
                                                "{missing}"), "{missing}"),
    # data
    Case("data check: missing IN-21K root", ("data", "check", "--in21k-root", "{missing}"), "{missing}", slow=True),
    Case("data split import: missing file", ("data", "split", "import", "{missing}"), "{missing}"),
    Case("data split import: not a split file", ("data", "split", "import", "{lv_notjson}"), "{lv_notjson}"),
    Case("data split export: IN-21K root is a file", ("data", "split", "export", "--level", "L1", "--in21k-root",
                                                      "{afile}", "--out", "{root}/s.json.gz"), "{afile}"),
    # feature stores
    Case("features info: missing store", ("features", "info", "{missing}"), "{missing}"),
    Case("features info: truncated .npy", ("features", "info", "{trunc}"), "features.npy"),
    Case("features info: labels out of range", ("features", "info", "{labels}"), "labels"),
    Case("features info: NaN features", ("features", "info", "{nan}"), "NaN", owner="A"),
    Case("features info: unreadable .npy", ("features", "info", "{locked}"), "features.npy",
         unix_permissions=True),
    Case("features import: not a .pth", ("features", "import", "{pth}", "{root}/imp", "--model", "m", "--domain",
                                         "cog_l1", "--split", "train"), "{pth}", slow=True),
    Case("features import: missing source", ("features", "import", "{missing}", "{root}/imp", "--model", "m",
                                             "--domain", "cog_l1", "--split", "train"), "{missing}"),
    Case("features export: missing store", ("features", "export", "{missing}", "{root}/X_Y.out.pth"), "{missing}",
         slow=True),
    Case("features regroup: missing root", ("features", "regroup", "--features-root", "{missing}", "--model", "m",
                                            "--measure", "wup"), "{missing}"),
    Case("levels compare: unknown wnid", ("levels", "compare", "{lv_unknown}"), NO_WNID),
    # probe tune / protocol
    Case("probe tune: --shots abc", ("probe", "tune", "--features", "{feat}", "--shots", "abc"), "--shots"),
    Case("probe protocol: --shots abc", ("probe", "protocol", "--features", "{feat}", *RES, "--shots", "abc"),
         "--shots"),
    Case("probe protocol: --seeds x", ("probe", "protocol", "--features", "{feat}", *RES, "--seeds", "x"),
         "--seeds"),
    Case("probe tune: --trials 0", ("probe", "tune", "--features", "{feat}", "--trials", "0"), "--trials",
         owner="C"),
    Case("probe tune: --trial-batch 0", ("probe", "tune", "--features", "{feat}", *P, "--trial-batch", "0"),
         "--trial-batch", owner="C", timeout=60, slow=True),
    Case("probe tune: --trial-batch -3", ("probe", "tune", "--features", "{feat}", *P, "--trial-batch", "-3"),
         "--trial-batch", owner="C", timeout=60, slow=True),
    Case("probe tune: negative --epochs", ("probe", "tune", "--features", "{feat}", "--epochs", "-2"), "--epochs",
         owner="C"),
    Case("probe tune: --batch-size 0", ("probe", "tune", "--features", "{feat}", "--batch-size", "0"),
         "--batch-size", owner="C"),
    Case("probe tune: missing features", ("probe", "tune", "--features", "{missing}", *P), "{missing}", slow=True),
    Case("probe tune: NaN features", ("probe", "tune", "--features", "{nan}", *P), "NaN", owner="A", slow=True),
    Case("probe tune: truncated features", ("probe", "tune", "--features", "{trunc}", *P), "features.npy", slow=True),
    Case("probe tune: labels out of range", ("probe", "tune", "--features", "{labels}", *P), "labels", slow=True),
    Case("probe tune: storage port out of range", ("probe", "tune", "--features", "{feat}", *P, "--storage",
                                                   "postgresql://u:secret@localhost:99999/x"), "localhost:99999",
         owner="D", slow=True),
    Case("probe tune: garbage journal", ("probe", "tune", "--features", "{feat}", *P, "--storage", "{journal}"),
         "{journal}", owner="D", slow=True),
    Case("probe tune: storage is another app's SQLite", ("probe", "tune", "--features", "{feat}", *P, "--storage",
                                                         "sqlite:///{foreign}"), "{foreign}", owner="D", slow=True),
    Case("probe tune: storage is not a database", ("probe", "tune", "--features", "{feat}", *P, "--storage",
                                                   "sqlite:///{notdb}"), "{notdb}", owner="D", slow=True),
    Case("probe tune: unknown storage scheme", ("probe", "tune", "--features", "{feat}", *P, "--storage",
                                                "nosuchdb://host/x"), "nosuchdb://host/x", owner="D", slow=True),
    Case("probe tune: results is another app's SQLite", ("probe", "tune", "--features", "{feat}", *P, "--results",
                                                         "{foreign}"), "{foreign}", slow=True),
    Case("probe protocol: results is not a database", ("probe", "protocol", "--features", "{feat}", *P, "--model",
                                                       "m", "--domain", "cog_l2", "--results", "{notdb}"), "{notdb}",
         slow=True),
    Case("probe fit: missing features", ("probe", "fit", "--config", "configs/probe/linear_probe.yaml",
                                         "--data.features", "{missing}", "--trainer.accelerator", "cpu"),
         "{missing}", slow=True),
    Case("probe fit: missing config", ("probe", "fit", "--config", "{missing}.yaml"), "{missing}.yaml", slow=True),
    # report
    Case("report: missing results", ("report", "--results", "{missing}.sqlite", "--out", "{root}/rep-none"),
         "results file {missing}.sqlite does not exist", absent=("{root}/rep-none",)),  # (issue 47: not "no rows")
    Case("report: another app's SQLite", ("report", "--results", "{foreign}"), "{foreign}"),
    Case("report: results not a database", ("report", "--results", "{notdb}"), "{notdb}"),
    # run, demo, noise
    Case("run: unknown model", ("run", "--model", "nosuch", "--in1k-root", "{root}", "--in21k-root", "{in21k}",
                                "--out", "{root}/run"), "nosuch", slow=True),
    Case("run: --shots abc", ("run", "--model", "resnet50", "--shots", "abc"), "--shots"),
    Case("run: --trials 0", ("run", "--model", "resnet50", "--trials", "0"), "--trials", owner="C"),
    Case("run: garbage checkpoint", ("run", "--model", "timm:resnet10t", "--checkpoint", "{ckpt}", "--in1k-root",
                                     "{root}", "--in21k-root", "{in21k}", "--out", "{root}/run", "--no-check"),
         "{ckpt}", slow=True),
    Case("demo: --image-size 0", ("demo", "--out", "{root}/demo", "--image-size", "0"), "--image-size", owner="C",
         slow=True),
    Case("demo: --out is a file", ("demo", "--out", "{afile}"), "{afile}", slow=True),
    Case("noise: missing features", ("noise", "--features", "{missing}", "--source", "in1k", "--target", "cog_l1"),
         "{missing}", slow=True),
    # LightningCLI commands
    Case("extract: unknown model", ("extract", "--model.model", "nosuch", "--data.out", "{root}/xout"), "nosuch",
         slow=True),
    Case("extract: garbage checkpoint", (*("extract", *X), "--model.random_weights", "false", "--model.checkpoint",
                                         "{ckpt}"), "{ckpt}", slow=True),
    Case("extract: missing IN-21K root", (*("extract", *X), "--data.in21k_root", "{missing}", "--data.domains",
                                          "[cog_l1]"), "{missing}", slow=True),
    Case("extract: corrupt JPEG", (*("extract", *X), "--data.in21k_root", "{in21k}", "--data.domains", "[cog_l1]",
                                   "--data.benchmark", "{root}/bench.json"), "{corrupt_jpeg}", owner="B",
         slow=True),
    Case("extract: unknown option value", ("extract", "--data.batch_size", "abc"), "batch_size", slow=True),
    Case("finetune: missing config", ("finetune", "fit", "--config", "{missing}.yaml"), "{missing}.yaml", slow=True),
    Case("finetune: config not YAML", ("finetune", "fit", "--config", "{yaml}"), "{yaml}", slow=True),
    Case("finetune: missing image root", ("finetune", "fit", "--config", "configs/finetune/demo.yaml",
                                          "--data.in21k_root", "{missing}", "--data.benchmark",
                                          "{root}/bench.json", "--model.model", "timm:resnet10t",
                                          "--model.checkpoint", "null", "--trainer.accelerator", "cpu",
                                          "--trainer.precision", "32-true"),
         "{missing}", slow=True),
    # inputs that once wrote a number they should not, or said nothing useful (issue 29)
    Case("probe tune: an empty train store", ("probe", "tune", "--features", "{empty}", *_cell("empty")),
         "{empty}/train: the train store has no rows", absent=_none("empty"), slow=True),
    Case("probe knn: an empty train store", ("probe", "knn", "--features", "{empty}", *_cell("kempty", True)),
         "{empty}/train: the train store has no rows", absent=_none("kempty"), slow=True),
    Case("probe tune: a test label the train split never has", ("probe", "tune", "--features", "{unseen}",
                                                                *_cell("unseen")),
         "{unseen}: the train store has 3 classes (labels 0..2), the test store 16", absent=_none("unseen"),
         slow=True),
    Case("probe knn: a test label the train split never has", ("probe", "knn", "--features", "{unseen}",
                                                               *_cell("kunseen", True)),
         "--allow-class-mismatch", absent=_none("kunseen"), slow=True),
    Case("probe tune: --shots beyond every class", ("probe", "tune", "--features", "{feat}", *_cell("shots"),
                                                    "--shots", "100000"),
         "--shots 100000: class 0 has 6 train rows", absent=_none("shots"), slow=True),
    Case("probe protocol: --shots beyond every class", ("probe", "protocol", "--features", "{feat}", *_cell("pshots"),
                                                        "--seeds", "22", "--shots", "all", "100000"),
         "--shots 100000", absent=_none("pshots"), slow=True),
    Case("probe knn: --shots beyond every class", ("probe", "knn", "--features", "{feat}", *_cell("kshots", True),
                                                   "--shots", "100000"),
         "--shots 100000", absent=_none("kshots"), slow=True),
    Case("probe protocol: --results is a folder", ("probe", "protocol", "--features", "{feat}", *_cell("rdir"),
                                                   "--seeds", "22", "--shots", "all", "--results", "{resdir}"),
         "results file {resdir} is a folder", absent=(*_none("rdir"), "{resdir}/*"), slow=True),
    Case("probe knn: --results is a folder", ("probe", "knn", "--features", "{feat}", "--probe-device", "cpu",
                                              "--results", "{resdir}"),
         "results file {resdir} is a folder", absent=("{resdir}/*",), slow=True),
    Case("run: the results file is a folder", ("run", "--model", "resnet50", "--in1k-root", "{root}", "--in21k-root",
                                               "{in21k}", "--out", "{rundir}", "--random-weights"),
         "results file {rundir}/results.sqlite is a folder", absent=("{rundir}/features", "{rundir}/results.sqlite/*"),
         slow=True),
    Case("probe tune: a storage port that is no number", ("probe", "tune", "--features", "{feat}", *_cell("port"),
                                                          "--storage", "postgresql://user:pw@host:notaport/db"),
         "storage postgresql://user:***@host:notaport/db: port 'notaport' is not a number", absent=_none("port"),
         slow=True),
    Case("probe tune: a features folder whose name is not UTF-8", ("probe", "tune", "--features", "{nonutf}",
                                                                   *_cell("nonutf")),
         "(the name of folder {nonutf_shown}) is not UTF-8 text", absent=_none("nonutf"), slow=True),
    Case("finetune test: a malicious pickle as --ckpt_path", ("finetune", "test", "--config",
                                                              "configs/finetune/demo.yaml", "--data.in21k_root",
                                                              "{in21k}", "--data.benchmark",
                                                              "{root}/bench.json", "--model.model", "timm:resnet10t",
                                                              "--model.checkpoint", "null", "--trainer.accelerator",
                                                              "cpu", "--trainer.default_root_dir", "{root}/ft",
                                                              "--ckpt_path", "{evil}", "--results",
                                                              "{root}/r-evil.sqlite"),
         "--ckpt_path {evil}: not a checkpoint this command can read: it pickles posix.system, which safe loading "
         "refuses", absent=("{root}/pwned", "{root}/r-evil.sqlite"), slow=True),
    Case("extract: negative --data.allow_missing", ("extract", *XO, "--data.out", "{root}/xout-am",
                                                    "--data.allow_missing", "-1"),
         "allow_missing=-1", absent=("{root}/xout-am",), slow=True),
    Case("extract: a devkit without its meta.mat", ("extract", *XO, "--data.out", "{root}/xout-dk", "--data.in1k_root",
                                                     "{devkit}", "--data.domains", "[in1k]", "--data.splits",
                                                     "[test]"),
         "{devkit}/ILSVRC2012_devkit_t12/data/meta.mat: the devkit's meta.mat is missing", absent=("{root}/xout-dk",),
         slow=True),
    Case("extract: IN-1K root at Kaggle's unpacked download", ("extract", *XO, "--data.out", "{root}/xout-kg",
                                                                "--data.in1k_root", "{kaggle}", "--data.domains",
                                                                "[in1k]"),
         "whose IN-1K root is {kaggle}/ILSVRC/Data/CLS-LOC", absent=("{root}/xout-kg",), slow=True),
    Case("features import: the file system refuses the space", ("features", "import", "{good_pth}", "{root}/imp-full",
                                                                "--model", "m", "--domain", "cog_l1", "--split",
                                                                "train"),
         "{root}/imp-full: asked for", env={"PYTHONPATH": "{enospc}"},
         absent=("{root}/imp-full", "{root}/.imp-full.partial"), slow=True),
    Case("features import: a pickle of a missing object", ("features", "import", "{key_pth}", "{root}/imp-key",
                                                           "--model", "m", "--domain", "cog_l1", "--split", "train"),
         "{key_pth}: not a readable X_Y.pth file: torch.load failed (KeyError: 101)", absent=("{root}/imp-key",),
         slow=True),
    Case("data check: a JSON file that is no benchmark file", ("data", "check", "--in21k-root", "{in21k}",
                                                               "--benchmark", "{foreign_bench}"),
         "benchmark file {foreign_bench} is not a cog-pl benchmark file", slow=True),
    # inputs that passed as something else (issue 37, item 8)
    Case("report --baseline: two models tested on other test splits", ("report", "--results", "{split_results}",
                                                                        "--levels", "{split_levels}", "--baseline",
                                                                        "base", "--out", "{root}/rep-split"),
         "{split_results}: cannot pair other/linear/cog_l1/shots=all/seed=22 (test split sha256 {split_other}) with "
         "base/linear/cog_l1/shots=all/seed=22 (test split sha256 {split_base})", absent=("{root}/rep-split",)),
    Case("report: label-noise predictions of another level", ("report", "--results", "{noise_results}", "--levels",
                                                               "{noise_levels}", "--out", "{root}/rep-noise"),
         "label-noise predictions {noise_l1} are m's in1k probe on cog_l2's test images, not m's in1k probe on "
         "cog_l1's", absent=("{root}/rep-noise",)),
    Case("report: a results file of format 1", ("report", "--results", "{results_v1}", "--out", "{root}/rep-v1"),
         "results file {results_v1} is in format 'cog-pl-results v1'", absent=("{root}/rep-v1",)),
    # model files (issue 37, item 8): a mirror that is not the published file, convert onto its input or over a
    # file, a folder given as the checkpoint
    Case("models download: a mirror's file that is not the published one", ("models", "download", "resnet50",
                                                                          "{root}/models-mirror", "--url",
                                                                          "file://{ckpt}", "--no-progress"),
         "does not start with the expected 19c8e357 (resnet50's published resnet50-19c8e357.pth)",
         absent=("{root}/models-mirror/resnet50/*",)),
    Case("models convert: the output is its own input", ("models", "convert", "dino", "{ckpt}",
                                                          "{root}/./garbage.ckpt"),
         "output {ckpt} is the input file itself: converting would replace it"),
    Case("models convert: an existing output without --overwrite", ("models", "convert", "dino", "{ckpt}",
                                                                     "{afile}"),
         "output {afile} exists; pass --overwrite to replace it"),
    Case("models check: a folder as the checkpoint", ("models", "check", "torchvision:resnet18", "{root}/levels"),
         "checkpoint {root}/levels is a folder, not a weights file"),
    Case("run: a folder as --checkpoint", ("run", "--model", "torchvision:resnet18", "--checkpoint", "{root}/levels",
                                           "--in21k-root", "{in21k}", "--benchmark", "{root}/bench.json", "--domains",
                                           "cog_l1", "--no-check", "--num-workers", "0", "--out", "{root}/run-dir"),
         "checkpoint {root}/levels is a folder, not a weights file", absent=("{root}/run-dir/features",),
         slow=True),
    Case("extract: a folder as --model.checkpoint", ("extract", "--model.model", "timm:resnet10t",
                                                      "--model.checkpoint", "{root}/levels", "--data.num_workers",
                                                      "0", "--trainer.accelerator", "cpu", "--data.out",
                                                      "{root}/xout-dir"),
         "checkpoint {root}/levels is a folder, not a weights file", absent=("{root}/xout-dir",), slow=True),
    # issue 37: the probe grid's claims file, the report's seed, the sbatch scripts' folder, run's --stale-after
    Case("probe protocol: the claims file is not a database", ("probe", "protocol", "--features", "{feat}",
                                                               *_cell("clbad"), "--seeds", "22", "--shots", "all"),
         "{root}/r-clbad.sqlite.claims: the probe grid's claims file", absent=_none("clbad")),
    Case("probe protocol: the claims file is a folder", ("probe", "protocol", "--features", "{feat}", *_cell("cldir"),
                                                         "--seeds", "22", "--shots", "all"),
         "{root}/r-cldir.sqlite.claims: the probe grid's claims file (which worker makes which cell) is a folder",
         absent=_none("cldir"), slow=True),
    Case("probe protocol: the claims file is read-only", ("probe", "protocol", "--features", "{feat}",
                                                          *_cell("clro"), "--seeds", "22", "--shots", "all"),
         "{root}/r-clro.sqlite.claims: cannot use the probe grid's claims file", absent=_none("clro"),
         unix_permissions=True, slow=True),
    Case("report: --seed -1", ("report", "--results", "{missing}.sqlite", "--seed", "-1"),
         "argument --seed: -1 is below the minimum, 0", absent=("{root}/report",)),
    Case("probe protocol: --launcher sbatch-scripts names a file", ("probe", "protocol", "--features", "{feat}",
                                                                    "--results", "{root}/lsb/r.sqlite", "--launcher",
                                                                    "sbatch-scripts", "{afile}"),
         "--launcher sbatch-scripts {afile}: a file, not a folder", absent=("{root}/lsb/slurm",)),
    Case("run: --stale-after 0", ("run", "--model", "timm:resnet10t", "--checkpoint", "{ckpt}", "--stale-after",
                                  "0"), "--stale-after must be a positive number of seconds"),
    # issue 37: a model label names one set of weights; no silent random weights
    Case("run: a paper model without its file", ("run", "--model", "resnet50", "--in21k-root", "{in21k}",
                                                 "--domains", "cog_l1", "--out", "{root}/run-nofile", "--no-check"),
         "resnet50 needs weights and has none: no file in {models_empty}/resnet50; fetch the published file with "
         "cog-pl models download resnet50, give one with --checkpoint FILE, or pass --random-weights",
         owner="A", env={"COG_PL_MODELS": "{models_empty}"}, absent=("{root}/run-nofile",)),
    Case("run: two files in a paper model's folder", ("run", "--model", "resnet50", "--models-dir", "{models_two}",
                                                      "--in21k-root", "{in21k}", "--domains", "cog_l1", "--out",
                                                      "{root}/run-two", "--no-check"),
         "2 files in {models_two}/resnet50 (a.pth, b.pth) and none is resnet50-19c8e357.pth", owner="A",
         absent=("{root}/run-two",)),
    Case("run: a timm model without weights", ("run", "--model", "timm:resnet10t", "--in21k-root", "{in21k}",
                                               "--domains", "cog_l1", "--out", "{root}/run-timm", "--no-check"),
         "timm:resnet10t is built without weights", owner="A", absent=("{root}/run-timm",)),
    # issue 47: an open_clip model open_clip does not know is no question of weights
    Case("run: an open_clip model that open_clip does not know", ("run", "--model", "open_clip:ViT-B-32x",
                                                                 "--in21k-root", "{in21k}", "--domains", "cog_l1",
                                                                 "--out", "{root}/run-ocx", "--no-check"),
         "open_clip:ViT-B-32x: open_clip knows no such model; did you mean 'ViT-B-32'?", owner="A",
         absent=("{root}/run-ocx",)),
    Case("run: an open_clip model without weights", ("run", "--model", "open_clip:ViT-B-32", "--in21k-root",
                                                     "{in21k}", "--domains", "cog_l1", "--out", "{root}/run-oc",
                                                     "--no-check"),
         "open_clip:ViT-B-32 is built without weights (open_clip's pretrained=None): give a file or one of its "
         "pretrained tags (openai, laion400m_e31", owner="A", absent=("{root}/run-oc",)),
    Case("run: --random-weights beside --checkpoint", ("run", "--model", "timm:resnet10t", "--checkpoint", "{second}",
                                                       "--random-weights", "--in21k-root", "{in21k}", "--domains",
                                                       "cog_l1", "--out", "{root}/run-both", "--no-check"),
         "--random-weights and --checkpoint {second}: give one of them", owner="A", absent=("{root}/run-both",)),
    Case("run: a label that is no folder name", ("run", "--model", "timm:resnet10t", "--checkpoint", "{second}",
                                                 "--name", "../up", "--in21k-root", "{in21k}", "--domains", "cog_l1",
                                                 "--out", "{root}/run-name", "--no-check"),
         "--name '../up': a label is a folder name", owner="A", absent=("{root}/run-name",)),
    Case("run: one label, two weights", ("run", "--model", "timm:resnet10t", "--checkpoint", "{second}",
                                         "--in21k-root", "{in21k}", "--domains", "cog_l1", "--out", "{run_label}",
                                         "--no-check"),
         "label resnet10t already names /elsewhere/first.pth (sha256 abababababababab) in {run_label}/features/"
         "resnet10t/cog_l1/train; this run's weights are {second} (sha256 ", owner="A",
         absent=("{run_label}/results.sqlite", "{run_label}/optuna.db", "{run_label}/features/resnet10t/cog_l1/test")),
    Case("extract: a paper model without its file", ("extract", "--config", "resnet50", "--data.out",
                                                     "{root}/xout-nofile", "--data.in21k_root", "{in21k}",
                                                     "--data.domains", "[cog_l1]"),
         "no file in {models_empty}/resnet50; fetch the published file with cog-pl models download resnet50, give "
         "one with --model.checkpoint FILE", owner="A", env={"COG_PL_MODELS": "{models_empty}"},
         absent=("{root}/xout-nofile",), slow=True),
    # issue 47: the last quiet traps (the demo's CNN without weights, a paper model's name on other weights, a
    # one-class store, a token grid past the feature map, a count threshold past every count, the report's inputs,
    # SLURM options sbatch misreads)
    Case("run: the demo's CNN without a file", ("run", "--model", "external:demo_cnn", "--in21k-root", "{in21k}",
                                                 "--domains", "cog_l1", "--out", "{root}/run-demo", "--no-check"),
         "external:demo_cnn is built without weights (cog_pl.models.arch.demo_cnn:DemoCNN initialises it at random): "
         "give a file with --checkpoint FILE (cog-pl demo writes OUT/data/demo_cnn.pt), or pass --random-weights",
         absent=("{root}/run-demo",)),
    Case("extract: the demo's CNN without a file", ("extract", "--model.model", "external:demo_cnn",
                                                     "--data.out", "{root}/xout-demo", "--data.in21k_root", "{in21k}",
                                                     "--data.domains", "[cog_l1]"),
         "external:demo_cnn is built without weights", absent=("{root}/xout-demo",), slow=True),
    Case("run: --name dino on other weights", ("run", "--model", "torchvision:resnet50", "--checkpoint", "{second}",
                                               "--name", "dino", "--in21k-root", "{in21k}", "--domains", "cog_l1",
                                               "--out", "{root}/run-dino", "--no-check"),
         "--name dino: the label of the paper's DINO (its published dino_resnet50_pretrain.pth on "
         "torchvision:resnet50), and these weights are {second}, not its published file", absent=("{root}/run-dino",)),
    Case("run: --name resnet50 on the demo's CNN", ("run", "--model", "external:demo_cnn", "--random-weights",
                                                    "--name", "resnet50", "--in21k-root", "{in21k}", "--domains",
                                                    "cog_l1", "--out", "{root}/run-r50", "--no-check"),
         "--name resnet50: the label of the paper's ResNet50 (its published resnet50-19c8e357.pth on "
         "torchvision:resnet50), and these weights are of another network, external:demo_cnn",
         absent=("{root}/run-r50",)),
    Case("extract: --model.name resnet50 on the demo's CNN", ("extract", *XO[4:], "--model.model",
                                                              "external:demo_cnn", "--model.random_weights", "true",
                                                              "--model.name", "resnet50", "--data.out",
                                                              "{root}/xout-r50"),
         "--model.name resnet50: the label of the paper's ResNet50", absent=("{root}/xout-r50",), slow=True),
    Case("probe tune: a one-class store", ("probe", "tune", "--features", "{oneclass}", *_cell("one")),
         "{oneclass}/train: the train store's 6 rows hold one class (label 0); a probe needs at least 2 classes",
         absent=_none("one"), slow=True),
    Case("probe knn: a one-class store", ("probe", "knn", "--features", "{oneclass}", *_cell("kone", True)),
         "{oneclass}/train: the train store's 6 rows hold one class", absent=_none("kone")),
    Case("probe fit: a one-class store", ("probe", "fit", "--config", "configs/probe/linear_probe.yaml",
                                          "--data.features", "{oneclass}", "--trainer.accelerator", "cpu",
                                          "--trainer.default_root_dir", "{root}/fit-one"),
         "{oneclass}/train: the train store's 6 rows hold one class", absent=("{root}/fit-one",), slow=True),
    Case("run: the attentive probe on a one-class store", ("run", "--model", "timm:resnet10t", "--checkpoint",
                                                           "{second}", "--in21k-root", "{in21k}", "--domains",
                                                           "cog_l1", "--out", "{run_oneclass}", "--stage", "probe",
                                                           "--methods", "attentive", "--seeds", "22", "--shots",
                                                           "all", "--trials", "1", "--epochs", "1", "--probe-device",
                                                           "cpu", "--no-check"),
         "{run_oneclass}/features/resnet10t/cog_l1/train: the train store's 6 rows hold one class",
         absent=("{run_oneclass}/optuna.db", "{run_oneclass}/report"), slow=True),  # (results.sqlite: no row)
    Case("extract: a token grid larger than the feature map", ("extract", *XO[4:], "--model.model",
                                                               "external:demo_cnn", "--model.random_weights", "true",
                                                               "--model.feature", "tokens9x9", "--model.transform",
                                                               "16", "--data.out", "{root}/xout-grid",
                                                               "--data.in21k_root", "{in21k}", "--data.domains",
                                                               "[cog_l1]", "--data.benchmark", "{root}/bench.json"),
         "feature 'tokens9x9': demo_cnn's last feature map is 4 x 4 at 16 px, smaller than the 9 x 9 grid",
         absent=("{root}/xout-grid",), slow=True),
    Case("run: a token grid larger than the feature map", ("run", "--model", "external:demo_cnn", "--random-weights",
                                                           "--feature", "tokens9x9", "--image-size", "16",
                                                           "--methods", "attentive", "--in21k-root", "{in21k}",
                                                           "--benchmark", "{root}/bench.json", "--domains", "cog_l1",
                                                           "--out", "{root}/run-grid", "--no-check",
                                                           "--num-workers", "0", "--accelerator", "cpu"),
         "feature 'tokens9x9': demo_cnn's last feature map is 4 x 4 at 16 px", absent=("{root}/run-grid/features/*/*",),
         slow=True),
    Case("levels build: --seen-min-count above every count", ("levels", "build", "--out", "{root}/lv-seen.json",
                                                              "--seen", "{vocab}", "--seen-min-count", "10"),
         "vocabulary {vocab}: none of its 3 entries is counted 10 times or more (the highest count is 3)",
         absent=("{root}/lv-seen.json",)),
    Case("report: --out is a file", ("report", "--results", "{noise_results}", "--levels", "{noise_levels}", "--out",
                                     "{afile}"),
         "report folder {afile} cannot be made: it is a file"),
    Case("report: --features names a missing folder", ("report", "--results", "{noise_results}", "--out",
                                                       "{root}/rep-feat", "--features", "{missing}"),
         "features {missing} does not exist", absent=("{root}/rep-feat",)),
    *(Case(f"run --launcher: {option} {value!r}", ("run", "--model", "resnet50", "--random-weights", "--in21k-root",
                                                   "{in21k}", "--domains", "cog_l1", "--out", "{root}/run-slurm",
                                                   "--launcher", "sbatch-scripts", "{root}/run-slurm/s", option,
                                                   value, "--dry-run"), said, absent=("{root}/run-slurm",))
      for option, value, said in (
          ("--partition", "", "argument --partition: partition '': a name of letters, digits"),
          ("--partition", "a b", "argument --partition: partition 'a b'"),
          ("--partition", "gpu;touch pwned", "argument --partition: partition 'gpu;touch pwned'"),
          ("--mem", "abc", "argument --mem: memory 'abc': use a whole number of megabytes or one with a K, M, G or T"),
          ("--time", "25:99:99", "argument --time: time '25:99:99': minutes 99 and seconds 99 out of range"),
          ("--time", "1-25:00:00", "argument --time: time '1-25:00:00': hours 25 out of range"),
          ("--sbatch-option", "time=5", "--sbatch-option time=5: sets sbatch's --time, which --time sets for every "
                                        "job; give --time instead"),
          ("--sbatch-option", "t=5", "--sbatch-option t=5: sets sbatch's --time"),
          ("--sbatch-option", "gres=gpu:2", "--sbatch-option gres=gpu:2: sets sbatch's --gres, which "
                                            "--gpus-per-node sets"),
          ("--sbatch-option", "array=0-9", "--sbatch-option array=0-9: sets sbatch's --array, which cog-pl sets for "
                                           "every job; it cannot be given"))),
)
