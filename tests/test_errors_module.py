"""The errors of cog_pl live in one module, and the library raises them for bad input (issue 38, item 4).

``cog-pl`` shows a :class:`~cog_pl.errors.CogError` as the user's error (one line, exit status 2) and anything else as
a defect (tests/cli/test_cli_errors.py). That holds only if every error class is defined in ``cog_pl/errors.py`` and no
bad-input path raises a plain ``ValueError``, ``TypeError``, ``KeyError`` or ``FileNotFoundError``: an AST scan of the
package, so a new module cannot slip one in.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import cog_pl.errors as errors

PACKAGE = Path(errors.__file__).parent
#: Builtin errors that say "the user gave something wrong" in other code; cog_pl raises its own kinds instead
#: (CogError, MissingFileError, WrongTypeError, NotFoundError keep these as bases).
PLAIN = ("ValueError", "TypeError", "KeyError", "FileNotFoundError")
#: Functions (qualified names) that may raise a plain ValueError: checks of what cog_pl's own code passes, never what a
#: user gives. One reaching ``cog-pl`` is a defect of cog_pl and is shown as one (traceback, exit status 1).
INTERNAL = {
    "ce_grad_": "the Triton kernel's preconditions on tensors the probe makes (probe/kernels.py)",
    "sgd_update_": "the Triton kernel's preconditions on tensors the probe makes (probe/kernels.py)",
    "PixelImages.__init__": "the extraction resolves the decode path before it builds the dataset",
    "Predictions.of": "ranked classes, labels and images of one evaluation always have one length",
    "write_info": "no caller writes the results file's format key but cog_pl.results",
    "spearman": "the report pairs each model's two means before it calls it (cog_pl.analysis.agreement)",
    "ImageDataset.__init__": "the datamodules build samples and labels from one list",
    "ordered": "the launcher builds the job graph; an unknown or circular dependency is its bug",
    "_levels": "aligned() gives the paired statistics arrays of one shape",
    "_pairs": "labels and predictions of one evaluation have one length",
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _name(node: ast.expr) -> str:
    """The last part of a dotted name (``sqlite3.OperationalError`` -> ``OperationalError``); '' for other nodes."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_exception_base(name: str) -> bool:
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, BaseException):
        return True
    return name in errors.__all__ or name.endswith(("Error", "Exception", "Warning"))


def _qualnames(tree: ast.Module) -> dict[ast.AST, str]:
    """Each node of ``tree`` -> the qualified name of the function (or class) it is in ('' at module level)."""
    out: dict[ast.AST, str] = {}

    def walk(node: ast.AST, name: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{name}.{child.name}" if name else child.name
            out[child] = inner
            walk(child, inner)

    walk(tree, "")
    return out


def test_every_error_class_is_defined_in_the_errors_module():
    found = []
    for path in _modules():
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(_is_exception_base(_name(b)) for b in node.bases):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} class {node.name}")
    assert not found, "error classes outside cog_pl/errors.py:\n" + "\n".join(found)


def test_the_errors_module_defines_what_it_exports_and_bad_input_kinds_are_cog_errors():
    defined = {n.name for n in ast.parse(Path(errors.__file__).read_text()).body if isinstance(n, ast.ClassDef)}
    assert defined == set(errors.__all__)
    machine = {"DiskFullError", "DownloadError", "UnreadableImageError", "ClaimsFileUnusable"}  # exit status 1
    for name in set(errors.__all__) - machine:
        assert issubclass(getattr(errors, name), errors.CogError), name
    for name in machine:
        assert not issubclass(getattr(errors, name), errors.CogError), name
    # each keeps the builtin base its callers caught before it moved
    assert issubclass(errors.StoreError, ValueError) and issubclass(errors.CheckpointError, ValueError)
    assert issubclass(errors.MissingFileError, FileNotFoundError) and issubclass(errors.WrongTypeError, TypeError)
    assert issubclass(errors.DiskFullError, OSError) and issubclass(errors.WordNetUnavailable, RuntimeError)


def test_old_import_paths_of_moved_classes_still_work():
    from cog_pl.features.store import StoreError  # docs/reference/api/features.md shows it there
    from cog_pl.io import DiskFullError
    from cog_pl.models.checkpoints import CheckpointError

    assert (StoreError, DiskFullError, CheckpointError) == (errors.StoreError, errors.DiskFullError,
                                                              errors.CheckpointError)


def _plain_raises() -> list[tuple[str, str, str]]:
    """(where, function, class) of each ``raise ValueError(...)`` (or another of :data:`PLAIN`) in the package."""
    out = []
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        names = _qualnames(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in PLAIN:
                    out.append((f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", names.get(node, ""), exc.id))
    return out


def test_no_bad_input_raises_a_plain_builtin_error():
    found = _plain_raises()
    left = [f"{where} in {func or 'module'}: raise {cls}" for where, func, cls in found
            if not (cls == "ValueError" and func in INTERNAL)]
    assert not left, ("raise a CogError subclass of cog_pl.errors for bad input (or add an internal check to "
                      "INTERNAL with its reason):\n" + "\n".join(left))
    stale = set(INTERNAL) - {func for _, func, _ in found}
    assert not stale, f"INTERNAL names functions that raise no plain ValueError any more: {sorted(stale)}"


@pytest.mark.parametrize("source", ["class Bad(ValueError):\n    pass\n", "def f(x):\n    raise ValueError(x)\n"])
def test_the_scan_sees_what_it_forbids(source):
    tree = ast.parse(source)
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
               and any(_is_exception_base(_name(b)) for b in n.bases)]
    raises = [n for n in ast.walk(tree) if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call)
              and _name(n.exc.func) in PLAIN]
    assert len(classes) + len(raises) == 1
