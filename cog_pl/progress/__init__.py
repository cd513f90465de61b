"""Progress of a long stage: a bar with an ETA on a terminal, plain log lines when the output is a file or a pipe.

:class:`Progress` is the one place that decides how progress looks; :class:`~cog_pl.progress.trainer.StageProgress`
(a Lightning callback, in its own module so that importing this one loads no Lightning) drives it from a Trainer
(extraction, fine-tuning, pretraining). On a terminal (stderr is a TTY) it is a ``tqdm`` bar with elapsed time, rate
and ETA. Elsewhere a bar's carriage returns would fill a log file with one line per redraw, so it logs
``<stage>: 40/120 batches (33 %), 12 s, about 24 s left`` at most every ``interval`` (30) seconds, and one closing
line.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Any

__all__ = ["Progress", "duration", "is_terminal"]

log = logging.getLogger(__name__)


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default: stderr, where progress and messages go) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


class Progress:
    """``total`` units of work of one stage, advanced with :meth:`update`; a context manager that closes itself."""

    def __init__(self, desc: str, total: float, unit: str = "it", *, terminal: bool | None = None,
                 interval: float = 30.0, enabled: bool = True) -> None:
        self.desc, self.total, self.unit, self.interval = desc, max(0.0, float(total)), unit, interval
        self.enabled = enabled
        self.done = 0.0
        self.start = self._last = time.monotonic()
        self._bar: Any = None
        if enabled and (is_terminal() if terminal is None else terminal):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=f" {unit}", file=sys.stderr, dynamic_ncols=True,
                             leave=True, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{unit} "
                                                    "[{elapsed}<{remaining}, {rate_fmt}]")

    def update(self, n: float = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled and self.done < self.total and time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            log.info("%s: %s", self.desc, self.line())

    def line(self) -> str:
        """``40/120 batches (33 %), 12 s, about 24 s left``."""
        spent = time.monotonic() - self.start
        text = f"{self.done:g}/{self.total:g} {self.unit} ({100 * self.done / max(self.total, 1e-9):.0f} %), " \
               f"{duration(spent)}"
        if 0 < self.done < self.total:
            text += f", about {duration(spent * (self.total - self.done) / self.done)} left"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.enabled and self.total > 0:
            self.enabled = False
            log.info("%s: %g %s in %s", self.desc, self.done, self.unit, duration(time.monotonic() - self.start))

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
