"""Components named by reference instead of by registered id: ``./path/file.py:Class``
(a Python file) or ``package.module:Class`` (an importable module).

A file is imported the way pytest's ``prepend`` mode does: its directory goes on
``sys.path`` and the module is imported under its file name, so its own sibling
imports work and worker processes (which share the driver's ``sys.path``) import the
class by name again. A file whose name is already taken by another module is refused
rather than shadowing it. A dotted module is looked up on ``sys.path`` with the current
directory appended (installed packages win over local folders).

Every failure is a ``ConfigError`` naming the option (``env``, ``env.taskset``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from taketurns._config.suggest import did_you_mean
from taketurns._errors import ConfigError

__all__ = ["absolute", "is_file_reference", "is_reference", "load_reference", "reference_name"]


def _split(ref: str) -> tuple[str, str]:
    where, _, name = ref.rpartition(":")
    return where, name


def is_reference(text: str) -> bool:
    """Whether ``text`` has the shape ``WHERE:Name`` (``Name`` possibly dotted)."""
    where, name = _split(text)
    return bool(where) and all(part.isidentifier() for part in name.split("."))


def is_file_reference(text: str) -> bool:
    """Whether ``text`` names a Python file (``./duel.py:Duel``, ``/abs/duel.py:Duel``)."""
    where, _ = _split(text)
    return is_reference(text) and (where.endswith(".py") or "/" in where or os.sep in where)


def absolute(ref: str) -> str:
    """``ref`` with a file path made absolute (so a stored config reruns from anywhere);
    a module reference or anything else unchanged."""
    if not is_file_reference(ref):
        return ref
    where, name = _split(ref)
    return f"{Path(where).expanduser().resolve()}:{name}"


def reference_name(ref: str) -> str:
    """The short name a referenced component goes by in records and directory names:
    ``duel:Duel`` for ``./envs/duel.py:Duel``, ``mypkg.duel:Duel`` for a module."""
    where, name = _split(ref)
    if is_file_reference(ref):
        where = Path(where).stem
    return f"{where}:{name}"


def load_reference(ref: str, *, field: str) -> Any:
    """Import what ``ref`` names. Raises ``ConfigError`` naming ``field``: no such file
    or module, the module failing to import (with where), no such attribute."""
    where, name = _split(ref)
    module = _import_file(where, ref, field) if is_file_reference(ref) else None
    if module is None:
        module = _import_module(where, ref, field)
    obj: Any = module
    for part in name.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            defined = sorted(k for k, v in vars(module).items() if isinstance(v, type))
            public = [k for k, v in vars(obj).items() if not k.startswith("_") and callable(v)]
            hint = did_you_mean(part, public)
            raise ConfigError(
                f"{field} = {ref!r}: {where} has no {name!r}; the classes it defines: "
                f"{', '.join(defined) or 'none'}{'; ' + hint if hint else ''}"
            ) from None
    return obj


def _import_file(where: str, ref: str, field: str) -> ModuleType:
    path = Path(where).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{field} = {ref!r}: no such file {path} (a path is FILE.py:Class)")
    stem = path.stem
    if not stem.isidentifier():
        raise ConfigError(
            f"{field} = {ref!r}: {path.name} cannot be imported (a Python file name is an "
            "identifier, e.g. my_env.py); rename the file"
        )
    loaded = sys.modules.get(stem)
    if loaded is not None:
        if _origin(getattr(loaded, "__file__", None)) == path:
            return loaded
        raise ConfigError(_taken(field, ref, stem, getattr(loaded, "__file__", None)))
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    spec = importlib.util.find_spec(stem)
    if spec is None or _origin(spec.origin) != path:
        if added:
            sys.path.remove(folder)
        raise ConfigError(_taken(field, ref, stem, spec.origin if spec else None))
    return _run_import(stem, ref, field)


def _import_module(where: str, ref: str, field: str) -> ModuleType:
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # like `python -m`: the current directory's packages
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):  # a parent package is missing, or a bad name
        found = None
    if found is None:
        raise ConfigError(
            f"{field} = {ref!r}: no module {where!r} on sys.path or in the current directory; "
            "name a file (./path/file.py:Class) or an importable module (package.module:Class)"
        )
    return _run_import(where, ref, field)


def _run_import(name: str, ref: str, field: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the user's module failed while importing: say where
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise ConfigError(
            f"{field} = {ref!r}: importing {name} failed{at} ({type(exc).__name__}: {exc})"
        ) from exc


def _origin(filename: str | None) -> Path | None:
    return Path(filename).resolve() if filename else None


def _taken(field: str, ref: str, stem: str, other: str | None) -> str:
    return (
        f"{field} = {ref!r}: the module name {stem!r} is already taken"
        f"{f' by {other}' if other else ''}; rename the file"
    )
