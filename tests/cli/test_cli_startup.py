"""The commands that answer at once import no deep-learning stack: ``cog-pl models list``, ``--help``, ``--version``,
every command's ``--help`` and every argument error run without torch, torchvision, timm or Lightning (each costs
seconds to import; ``benchmarks/bench_cli_startup.py`` times the commands). The LightningCLI commands (``extract``,
``finetune``, ``probe fit|validate|test``) are left out: their options are read from Lightning's classes.

One fresh interpreter runs every such command line through :func:`cog_pl.cli.main.main` and says which one, if any,
brought a heavy module in; no time is measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "torchvision", "timm", "lightning", "pytorch_lightning")

#: Runs every quick command line in this interpreter, in order; prints the first that imported a heavy module.
PROBE = """
import argparse, contextlib, io, json, sys
from cog_pl.cli.main import LIGHTNING_COMMANDS, build_parser, main

HEAVY = {heavy!r}
def commands(parser, words=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = (*words, name)
                if not any(path[:len(names)] == names for names in LIGHTNING_COMMANDS):
                    yield path
                    yield from commands(sub, path)

lines = [["--help"], ["--version"], ["models", "list"], ["models", "list", "--json"], ["run", "--trials", "x"],
         ["run", "--seeds", "x"], ["models", "download"], ["-v", "models", "list"]]
for path in commands(build_parser()):
    lines += [[*path, "--help"], [*path, "--no-such-option"]]
codes = {{}}
for argv in lines:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as done:
            code = done.code
    codes[" ".join(argv)] = code
    loaded = [m for m in HEAVY if m in sys.modules]
    if loaded:
        print(json.dumps({{"first": " ".join(argv), "loaded": loaded, "codes": codes}}))
        sys.exit(0)
print(json.dumps({{"first": None, "loaded": [], "codes": codes}}))
"""


def test_quick_commands_and_argument_errors_import_no_torch():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["first"] is None, f"cog-pl {seen['first']} imported {', '.join(seen['loaded'])}"
    codes = seen["codes"]
    assert codes["--help"] == 0 and codes["--version"] == 0 and codes["models list"] == 0
    assert codes["run --trials x"] == 2 and codes["models download"] == 2 and codes["run --no-such-option"] == 2
    assert codes["models download --help"] == 0 and codes["run --help"] == 0
    assert len(codes) > 60  # every command's help and an error of each were run


def test_models_list_prints_the_feature_column_its_help_promises(capsys):
    from cog_pl.cli.main import build_parser, main

    models = next(a for a in build_parser(only="models")._actions if a.dest == "command").choices["models"]
    actions = next(a for a in models._actions if a.dest == "models_command")._choices_actions
    assert "feature" in next(a.help for a in actions if a.dest == "list")  # what `cog-pl models --help` says
    assert main(["models", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert head[:6] == ["model", "paper", "group", "architecture", "feature", "dim"]
    rows = {line.split()[0]: line.split() for line in lines[1:32]}
    assert rows["vgg19"][4] == "fc7" and rows["deit_s"][4] == "cls_token" and rows["clip"][4] == "output"
    assert rows["resnet50"][4] == "penultimate" and rows["resnet50"][5] == "2048"
