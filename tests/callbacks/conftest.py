"""Fixtures of the callback tests: the console lines the Trainer's package prints on rank zero."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture
def lines():
    """The lines the Trainer's package prints on rank zero (``GPU available: ...`` and the callback's)."""
    got: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record.getMessage())

    handler = Keep(logging.INFO)
    loggers = [logging.getLogger(f"{p}.utilities.rank_zero") for p in ("lightning.pytorch", "pytorch_lightning")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    yield got
    for log, level in zip(loggers, levels):
        log.removeHandler(handler)
        log.setLevel(level)
