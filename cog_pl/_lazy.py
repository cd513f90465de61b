"""Package exports loaded on first use (PEP 562), so that importing a package costs only what its caller uses."""

from __future__ import annotations

from collections.abc import Callable

from cog_pl.registry import load_object


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public ``exports`` map names to their modules (relative
    to the package when they start with a dot); the package's ``__all__`` lists the same names."""
    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = load_object(f"{module}:{name}", package)
        setattr(load_object(package), name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(load_object(package)), *exports})

    return __getattr__, __dir__
