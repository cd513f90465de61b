"""Writes ``results_v1.sqlite`` and its reports with the format-1 code of commit 0ea763b (model ``<name>@finetune``
for fine-tuned rows): the fixture of tests/test_results.py. Run from a copy of that commit:

    git archive 0ea763b | tar -x -C /tmp/cog_v1
    PYTHONPATH=/tmp/cog_v1 python tests/data/results_v1/make_v1.py tests/data/results_v1
"""

import shutil
import sys
from pathlib import Path

from cog_pl.report.build import write_report
from cog_pl.results import FORMAT_VERSION, append_row

DOMAINS = ["in1k", *(f"cog_l{i}" for i in range(1, 6))]


def probe_row(model, domain, shots, seed, top1):
    return {"format_version": FORMAT_VERSION, "model": model, "domain": domain, "shots": shots, "seed": seed,
            "lr": 0.1, "wd": 1e-4, "test_top1": top1, "test_top5": min(100.0, top1 + 12.5), "mode": "grid"}


def main(out: Path) -> None:
    assert FORMAT_VERSION == 1, "run with the format-1 code"
    path = out / "results_v1.sqlite"
    path.unlink(missing_ok=True)
    for m, model in enumerate(("resnet50", "dino")):
        for seed in (22, 37):
            for i, domain in enumerate(DOMAINS):
                for shots in (None, 1, 4):
                    top1 = 80 - 6 * i + 3 * m + (seed - 22) / 10 - {None: 0, 1: 40, 4: 25}[shots]
                    append_row(path, probe_row(model, domain, shots, seed, round(top1, 3)))
    for seed in (22, 37):  # a level variant of dino
        for i in range(1, 6):
            append_row(path, probe_row("dino", f"cog_l{i}@wup", None, seed, 75 - 3 * i + (seed - 22) / 5))
    for model, domains in (("dino", DOMAINS), ("resnet50", ["in1k", "cog_l3"])):
        for i, domain in enumerate(domains):
            append_row(path, {"model": model + "@finetune", "domain": domain, "shots": None, "seed": 22,
                              "method": "finetune", "test_top1": 88.0 - 4 * i, "test_top5": 97.0, "epochs": 2})
    for name, baseline in (("report", None), ("report_baseline", "resnet50")):
        files = write_report(path, out / name, baseline=baseline)
        for f in files.values():
            if f.suffix == ".png":
                f.unlink()
    shutil.rmtree(out / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
