"""The Export dialog's logic, without Qt: target validation, a cancellable export, the check.

- ``target_problem(folder, name)``: why ``folder/name`` cannot be the package (the name
  is the package's: ``python -m <name> --check``), or None; ``target_note`` says what
  happens to an existing folder.
- ``export_session(session, target, backend, token)``: ``Session.export`` into a private
  staging folder beside the target, then one rename into place. A cancelled or failed
  export leaves nothing behind (neither the staging folder nor the exporter's
  ``.<name>.tmp-export``); the target is replaced only when it is empty or an earlier
  export (the exporter's own rule), so a user's folder is never deleted. Staging folders
  left by a studio that died are removed by the next export of that name.
- ``check_command(result)``: the ``--check`` command line and its working folder.
- ``gpu_reason()``: why the CUDA backend cannot run here (cached; the first call imports
  CuPy, so call it off the GUI thread).
"""
from __future__ import annotations

import keyword
import os
import re
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from codegen.export.package import ExportError, ExportResult
from codegen.export.package import check_replaceable   # the exporter's own rule
from studio.gui.jobs import Cancelled, CancelToken, Progress, no_progress
from studio.session.core import Session
from studio.session.marker import pid_alive

RESERVED = {"numpy", "numba", "llvmlite", "cupy", "cupyx", "scipy"}   # modules an exported package imports
STAGING = "dcstudio-export"
_gpu: dict[str, str | None] = {}
_gpu_lock = threading.Lock()


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name the package (None when it can)."""
    if not name:
        return "Enter a package name, e.g. bert_step"
    if not name.isidentifier():
        return f"'{name}' is not a Python identifier: use letters, digits and _, not starting with a digit"
    if name.startswith("_"):
        return f"'{name}' starts with _: the package name must not be private"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        return f"'{name}' is a Python keyword"
    if name in sys.stdlib_module_names or name in RESERVED:
        return f"'{name}' would shadow the module {name} that Python or the package needs"
    return None


def default_folder(model_path: str | None) -> Path:
    """Where an export goes unless the user chose a folder before: beside the model, or
    ``~/dcstudio-exports`` when the model is the bundled example (or any file inside the studio's own
    tree, which an update may replace) or its folder is not writable."""
    own_tree = Path(__file__).resolve().parents[2]
    if model_path:
        folder = Path(model_path).resolve().parent
        if not folder.is_relative_to(own_tree) and os.access(folder, os.W_OK):
            return folder
    return Path.home() / "dcstudio-exports"


def default_name(model_name: str) -> str:
    """A package name for a model's export: its stem as an identifier, plus ``_step``."""
    stem = re.sub(r"\W", "_", Path(model_name).stem, flags=re.ASCII).strip("_") or "model"
    name = f"{stem}_step"
    return f"m_{name}" if name[0].isdigit() else name


def target_problem(folder: str, name: str) -> str | None:
    """Why ``folder/name`` cannot be written (None when it can, as far as can be told now)."""
    problem = name_problem(name)
    if problem:
        return problem
    if not folder:
        return "Choose the folder to export into"
    parent = Path(folder)
    existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        return f"The folder {parent} does not exist" if existing is None else f"{existing} is not a folder"
    if not os.access(existing, os.W_OK):
        return f"The folder {existing} is not writable"
    target = parent / name
    if target.exists() and not target.is_dir():
        return f"{target} exists and is not a folder"
    return None


def target_note(folder: str, name: str) -> str:
    """What the export will do with ``folder/name`` (for the dialog, once the target is valid)."""
    target = Path(folder) / name
    if not Path(folder).is_dir():
        return f"Creates the folder {folder} and writes the package {target}"
    if target.is_dir() and any(target.iterdir()):
        return (f"{target} exists: it is replaced if it is an earlier dcstudio export "
                "(any other folder is left untouched and the export stops)")
    return f"Writes the package {target}"


def _sweep(parent: Path, name: str) -> None:
    """Remove staging folders of ``name`` whose studio process is gone."""
    prefix = f".{name}.{STAGING}-"
    for old in parent.glob(prefix + "*"):
        pid = old.name[len(prefix):].split("-", 1)[0]
        if old.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def _swap(staged: Path, target: Path) -> None:
    """Move ``staged`` to ``target``, replacing an earlier export there (never anything else)."""
    check_replaceable(target)
    if not target.exists():
        staged.rename(target)
        return
    old = staged.parent / ".previous"                 # a dot name: never a package name
    target.rename(old)
    try:
        staged.rename(target)
    except OSError:
        old.rename(target)
        raise


def export_session(session: Session, target: str | os.PathLike, backend: str = "cpu", *,
                   token: CancelToken | None = None, progress: Progress = no_progress) -> ExportResult:
    """Export ``session``'s current graph to ``target`` (see the module docstring)."""
    token = token or CancelToken()
    target = Path(target).absolute()
    problem = target_problem(str(target.parent), target.name)
    if problem:
        raise ExportError(problem)
    check_replaceable(target)                          # refuse a user's folder before any work
    made = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _sweep(target.parent, target.name)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.{STAGING}-{os.getpid()}-", dir=target.parent))
    except OSError as e:
        _unmake(made)
        raise ExportError(f"cannot write in {target.parent}: {e.strerror or e}") from None
    try:
        token.check("the export")
        progress(0, 2, f"generating {backend} code for {target.name}")
        result = session.export(staging / target.name, backend)
        token.commit("the export")                     # from here on the export happens: no late cancel
        progress(1, 2, f"moving the package to {target}")
        _swap(staging / target.name, target)
    except OSError as e:
        raise ExportError(f"could not write {e.filename or target}: {e.strerror or e}; nothing was "
                          "exported") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not target.exists():
            _unmake(made)
    progress(2, 2, f"exported {target}")
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    return ExportResult(target, result.package, result.kernels, result.statements, files, result.traffic)


def _unmake(made: list[Path]) -> None:
    """Remove the folders an export created for itself (innermost first) when it wrote nothing there."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:
            return


def check_command(result: ExportResult) -> tuple[str, list[str], str]:
    """``(program, arguments, working folder)`` of the package's ``--check``."""
    return sys.executable, ["-m", result.package, "--check"], str(Path(result.path).parent)


def verdict(exit_code: int | None, output: str) -> tuple[bool, str]:
    """(passed, one line) for a finished check; ``exit_code`` None when it was stopped."""
    if exit_code is None:
        return False, "The check was stopped before it finished"
    summary = next((ln for ln in reversed(output.splitlines()) if "outputs match" in ln), "")
    if exit_code == 0:
        return True, f"Check passed: {summary}" if summary else "Check passed"
    return False, f"Check FAILED (exit code {exit_code})" + (f": {summary}" if summary else "")


def gpu_reason() -> str | None:
    """Why the CUDA backend cannot run here, or None when a device is present (cached)."""
    with _gpu_lock:
        if "reason" not in _gpu:
            try:
                from codegen.cupy_cuda.profile import device_reason
                _gpu["reason"] = device_reason()
            except Exception as e:  # noqa: BLE001 - a broken driver or CuPy: say so, never crash
                _gpu["reason"] = f"CUDA is not usable: {type(e).__name__}: {e}"
        return _gpu["reason"]


def gpu_known() -> bool:
    """Whether ``gpu_reason`` has been computed (the dialog asks a worker only once)."""
    return "reason" in _gpu


def find_gpu(window, found) -> None:
    """Call ``found(gpu_reason())``: at once when it is known, else once a task of ``window`` (off the GUI
    thread: importing CuPy and asking the driver take a while) has found out."""
    if gpu_known():
        found(gpu_reason())
        return
    task = window.run_task("Looking for a CUDA device", lambda token, progress: gpu_reason(), track=False)
    task.succeeded.connect(found)


__all__ = ["Cancelled", "ExportError", "check_command", "default_name", "export_session", "find_gpu", "gpu_reason",
           "name_problem", "target_note", "target_problem", "verdict"]
