"""``cog-pl demo``'s console, as a user sees it on a terminal (a pseudo-terminal) and in a log (a pipe): every line
once, no warning, progress as a bar on the terminal and as plain lines in the log, the closing summary."""

from __future__ import annotations

import errno
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: The smallest demo that still runs every stage: two backbones, probes, one variant, fine-tuning, the report.
TINY = ["--seen", "4", "--per-level", "3", "--train-per-concept", "8", "--test-per-concept", "4",
        "--pretrain-epochs", "1", "--ssl-epochs", "1", "--trials", "2", "--epochs", "2", "--seeds", "22",
        "--shots", "all", "1", "--variants", "wup"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
NOISE = re.compile(r"warning|deprecat|💡|tip:|litlogger|INFO:", re.IGNORECASE)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "COLUMNS": "120", "PYTHONWARNINGS": ""}


def _command(out: Path) -> list[str]:
    return [sys.executable, "-m", "cog_pl.cli.main", "demo", "--out", str(out), *TINY]


def _run_in_pty(cmd: list[str]) -> tuple[int, str]:
    """Run ``cmd`` with stdout and stderr on a pseudo-terminal; returns its status and everything it wrote."""
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=_env(), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError as err:  # EIO: the child closed the terminal
            if err.errno != errno.EIO:
                raise
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=600), b"".join(chunks).decode("utf-8", "replace")


def screen_lines(text: str) -> list[str]:
    """The lines as they stay on screen: a line redrawn with carriage returns (a progress bar) is its last state."""
    text = ANSI.sub("", text).replace("\r\n", "\n")
    lines = [line.split("\r")[-1].rstrip() for line in text.split("\n")]
    return [line for line in lines if line.strip()]


def _check(lines: list[str], out: Path) -> None:
    messages = [line for line in lines if not set(line) <= set("|-: ")]  # table rules repeat by nature
    repeated = sorted({line for line in messages if messages.count(line) > 1})
    assert not repeated, f"printed more than once: {repeated}"
    noisy = [line for line in lines if NOISE.search(line)]
    assert not noisy, f"noise reached the user: {noisy}"
    assert "Traceback" not in "\n".join(lines)
    assert not any("± 0.00" in line for line in lines)  # one seed: "(n = 1)", no made-up spread
    text = "\n".join(lines)
    stores = sorted([*(out / "features").glob("*/*/*/meta.json"),  # the baseline's run
                     *(out / "demo_cnn_ssl" / "features").glob("*/*/*/meta.json")])  # the second model's own run
    assert len(stores) == 2 * 12 + 10  # two models' six domains, the baseline's wup variant
    for meta in stores:
        assert text.count(f"wrote feature store {meta.parent} ") == 1  # one message per store written
    for stage in ("extract demo_cnn", "probe demo_cnn", "extract demo_cnn_ssl", "probe demo_cnn_ssl",
                  "finetune demo_cnn", "pretrain demo_cnn (supervised)", "pretrain demo_cnn_ssl (self-supervised)"):
        assert re.search(rf"^  {re.escape(stage)} +\d", text, re.M), f"no time for {stage}"
    assert "| demo_cnn_ssl | " in text and "  - Relative to demo_cnn (top-1 points)" in text  # the rest: a line each
    assert "  - Mistake severity per level (all data, over seeds)" in text  # issue 48: from the stored predictions
    assert "protocol: custom (2 trials × 2 epochs)" in text and not any(line.startswith("## ") for line in lines)
    assert f"report: {out / 'report' / 'report.md'}" in text and f"plot:   {out / 'report' / 'domains_relative.png'}" \
        in text


@pytest.mark.slow
def test_demo_console_on_a_terminal_and_in_a_pipe(tmp_path):
    piped = subprocess.run(_command(tmp_path / "pipe"), capture_output=True, text=True, env=_env(), timeout=900)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "\r" not in piped.stdout + piped.stderr  # no progress bar redrawn into a log
    lines = screen_lines(piped.stderr) + screen_lines(piped.stdout)
    _check(lines, tmp_path / "pipe")
    assert any(re.match(r"extracting demo_cnn: \d+ batches in \d", line) for line in lines)  # plain closing lines
    assert any(re.match(r"probes of demo_cnn_ssl: \d+ rows in \d", line) for line in lines)

    status, text = _run_in_pty(_command(tmp_path / "tty"))
    assert status == 0, text[-3000:]
    lines = screen_lines(text)
    _check(lines, tmp_path / "tty")
    bars = [line for line in lines if "|" in line and re.search(r"\d+/\d+ (batches|rows) \[", line)]
    for name in ("extracting demo_cnn", "probes of demo_cnn", "fine-tuning demo_cnn on cog_l5",
                 "pretraining demo_cnn_ssl"):
        assert any(line.startswith(name) for line in bars), f"no progress bar for {name}: {bars}"
    assert all("<" in line for line in bars)  # elapsed<remaining: the ETA
