"""``cog-pl run --config FILE`` and ``cog-pl demo --config FILE``: a YAML file of the command's options stands for
the flags it holds, where it stands on the command line; the run, its records and its SLURM jobs see the flags; a
bad file is refused in one line naming the file and the option."""

from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest
from bad_input_cases import COG_PL

from cog_pl.cli.config_file import expand_config_files
from cog_pl.cli.main import build_parser

#: Every kind of option of ``cog-pl run`` as a file gives it, and the flags that say the same.
FILE = """\
model: external:demo_cnn
checkpoint: [/weights/a.pt]
in1k_root: /data/in1k            # underscores or hyphens alike
in21k-root: /data/in21k
image-size: 32
domains: [in1k, cog_l5]
methods: [linear, ridge, finetune]
shots: [all, 1, 8]
seeds: 22
ridge-regs: [0.5, 4]             # a method's option
finetune-epochs: 3
finetune-recipe: '{"lr": 0.1}'
html: false                      # --no-html
noise-predictions: true          # --noise-predictions
overwrite: true                  # a switch
no-check: false                  # a switch left out
trust-checkpoint: null           # nothing given
sbatch-option: [qos=high, account=lab]
protocol: quick
time: "1:30:00"                  # --time (its value lands in time_limit)
"""
FLAGS = ["--model", "external:demo_cnn", "--checkpoint", "/weights/a.pt", "--in1k-root", "/data/in1k",
         "--in21k-root", "/data/in21k", "--image-size", "32", "--domains", "in1k", "cog_l5", "--methods", "linear",
         "ridge", "finetune", "--shots", "all", "1", "8", "--seeds", "22", "--ridge-regs", "0.5", "4",
         "--finetune-epochs", "3", "--finetune-recipe", '{"lr": 0.1}', "--no-html", "--noise-predictions",
         "--overwrite", "--sbatch-option", "qos=high", "--sbatch-option", "account=lab", "--protocol", "quick",
         "--time", "1:30:00"]


def _parsed(argv: list[str]):
    parser = build_parser(only="run")
    return parser.parse_args(expand_config_files(parser, argv))


def test_a_file_gives_the_options_its_flags_give(tmp_path):
    (tmp_path / "run.yaml").write_text(FILE)
    from_file = _parsed(["run", "--config", str(tmp_path / "run.yaml")])
    from_flags = _parsed(["run", *FLAGS])
    assert vars(from_file) == vars(from_flags)
    assert from_file.shots == [None, 1, 8] and from_file.ridge_regs == [0.5, 4.0] and from_file.html is False
    assert from_file.overwrite is True and from_file.no_check is False and from_file.time_limit == 90


def test_a_flag_after_the_file_overrides_it_one_before_is_overridden(tmp_path):
    (tmp_path / "run.yaml").write_text("trials: 7\nshots: [all, 1]\nhtml: false\n")
    args = _parsed(["run", "--trials", "3", "--config", f"{tmp_path}/run.yaml", "--shots", "8", "--html"])
    assert (args.trials, args.shots, args.html) == (7, [8], True)
    args = _parsed(["run", f"--config={tmp_path}/run.yaml"])
    assert (args.trials, args.shots, args.html) == (7, [None, 1], False)


def test_other_commands_keep_their_own_config_option():
    """``--config`` of the LightningCLI commands and of commands without one is not read as a run file."""
    parser = build_parser()
    assert expand_config_files(parser, ["report", "--config", "x.yaml"]) == ["report", "--config", "x.yaml"]


@pytest.fixture(scope="module")
def demo_from_file(tmp_path_factory):
    """``cog-pl demo --config`` at its smallest, through the installed command, and its output folder."""
    root = tmp_path_factory.mktemp("demo_config")
    (root / "demo.yaml").write_text(
        "seen: 2\nper-level: 2\ntrain-per-concept: 5\ntest-per-concept: 2\nimage-size: 16\npretrain-epochs: 1\n"
        "ssl-epochs: 0\nfinetune: false\nseeds: [22]\nshots: [all]\ntrials: 2\nepochs: 2\nvariants: []\n"
        "methods: [linear, ridge]\nridge-regs: [1, 64]\nhtml: false\n")
    proc = subprocess.run([COG_PL, "demo", "--config", str(root / "demo.yaml"), "--out", str(root / "out")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def test_the_demo_runs_as_its_file_says(demo_from_file):
    out = demo_from_file / "out"
    with sqlite3.connect(out / "results.sqlite") as db:
        rows = [(m, s, sh, json.loads(r)) for m, s, sh, r in db.execute("select method, seed, shots, row from rows")]
    assert {m for m, *_ in rows} == {"linear", "ridge"} and {s for _, s, *_ in rows} == {22}
    ridge = [r for m, _, _, r in rows if m == "ridge"]
    assert ridge and all(r["ridge"]["regs"] == [1.0, 64.0] for r in ridge), ridge[0]
    assert (out / "report" / "report.md").is_file() and not (out / "report" / "report.html").exists()


def test_the_launchers_jobs_run_the_flags_not_the_file(demo_from_file, tmp_path):
    """A file's launcher options set the jobs' resources; each job's command holds the file's other options as
    flags, so the file need not reach the cluster's nodes and no job launches again."""
    data = demo_from_file / "out" / "data"
    (tmp_path / "run.yaml").write_text(
        f"model: external:demo_cnn\ncheckpoint: {data / 'demo_cnn.pt'}\ndata: {data}\nmethods: [linear, ridge]\n"
        "ridge-regs: [1, 2]\npartition: gpu\ntime: '2:00:00'\n")
    proc = subprocess.run([COG_PL, "run", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "o"),
                           "--launcher", "sbatch-scripts", str(tmp_path / "scripts"), "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = [line for line in proc.stdout.splitlines() if ": cog-pl run " in line]
    assert len(commands) == 4 and "time 2:00:00, partition gpu" in proc.stdout, proc.stdout
    for line in commands:
        assert "--config" not in line and "--ridge-regs 1 2" in line and "--partition" not in line, line


@pytest.mark.parametrize(("text", "names"), [
    ("modle: x\n", "modle: no such option of this command (did you mean model?)"),
    ("image-size: abc\n", "image-size: 'abc' is not an integer"),
    ("image-size: [32]\n", "image-size: one value, not a list"),
    ("decode: fast\n", "decode: 'fast' is not one of pil, cpu, gpu, auto"),
    ("overwrite: yes please\n", "overwrite: true or false (the switch --overwrite)"),
    ("methods: []\n", "methods: at least one value"),
    ("- model\n", "a mapping of option names to values, not a list"),
    ("model: [\n", "not YAML at line 2"),
], ids=["unknown", "type", "list", "choice", "switch", "empty", "not-mapping", "not-yaml"])
def test_a_bad_file_is_refused_in_one_line_naming_it(tmp_path, text, names):
    (tmp_path / "run.yaml").write_text(text)
    proc = subprocess.run([COG_PL, "run", "--config", str(tmp_path / "run.yaml")], capture_output=True, text=True,
                          timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("cog-pl run: error: --config ") and names in lines[0], lines
    assert str(tmp_path / "run.yaml") in lines[0]


def test_a_missing_file_or_a_shortened_flag_is_refused(tmp_path):
    for argv, names in ((["--config", str(tmp_path / "no.yaml")], f"--config {tmp_path / 'no.yaml'}: no such file"),
                        (["--conf", str(tmp_path / "no.yaml")], "give it as --config")):
        proc = subprocess.run([COG_PL, "run", *argv], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and names in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
            proc.stderr
