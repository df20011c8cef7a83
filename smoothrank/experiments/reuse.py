"""Reuse the finished runs of other experiment folders (``smoothrank experiment SPEC --reuse DIR``).

Specs that share cells (a blend experiment and the seed ensembles of its members, a refit of a
grid and the grid) need not train them twice. A run of a source folder is reused when its run id
is a cell of the spec and its recorded fingerprint equals the cell's: the fingerprint covers every
setting and the data files' contents (:meth:`~smoothrank.experiments.spec.Cell.identity`), so a
reused run is exactly the run the spec would make. A run with the same id and other settings is
left where it is, as is a source run that is damaged.

A refit cell (``refit: true``) has its own fingerprint, but its first step, the selection training,
is the same as the non-refit cell's: a finished non-refit run of the same settings lends its
``train/`` folder, the run resumes that training at its end, and only the refit is computed.

A run is copied into ``OUT/runs/<run id>`` only when nothing is there yet (a finished or
interrupted run of the folder itself is never replaced): whole into ``OUT/.reuse-staging/``, then
renamed, so that a killed copy leaves nothing in ``runs/`` (the next command empties the staging
folder). A run that cannot be copied is left out with a warning, and its cell is run.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from smoothrank.errors import SmoothrankError, SmoothrankWarning
from smoothrank.experiments.spec import Cell

__all__ = ["STAGING", "Reuse", "apply_reuse", "check_sources", "find_reusable"]

STAGING = ".reuse-staging"  # OUT/<this>/<run id>: a run being copied, renamed into OUT/runs when whole


@dataclass(frozen=True)
class Reuse:
    """One cell to take from another folder: the whole finished run, or (a refit cell) the
    selection training (``train/``) of a finished run of the same settings without refit."""

    cell: Cell
    source: Path  # the source run folder, ``DIR/runs/<run id>``
    part: Literal["run", "train"]

    def describe(self) -> str:
        what = "reused" if self.part == "run" else "selection training reused"
        return f"{what} from {self.source.parent.parent}"


def _selection_twin(cell: Cell) -> Cell:
    """The cell of the same settings without refit: its training is a refit cell's first step."""
    settings = {k: v for k, v in cell.settings.items() if k != "refit"}
    return cell.model_copy(update={"settings": settings})


def _finished_fingerprint(run_dir: Path) -> str | None:
    """The fingerprint of the finished run in ``run_dir`` (None: none, damaged, or unreadable)."""
    from smoothrank.experiments.results import RESULT_FILE
    from smoothrank.experiments.runner import read_result

    try:
        path = run_dir / RESULT_FILE
        fingerprint = read_result(path).get("fingerprint") if path.is_file() else None
    except (SmoothrankError, OSError):
        return None
    return fingerprint if isinstance(fingerprint, str) else None


def check_sources(sources: Sequence[str | Path]) -> list[Path]:
    """The source folders as paths; each must be an experiment output folder (it has ``runs/``)."""
    roots = [Path(s) for s in sources]
    for root in roots:
        if not root.is_dir():
            why = "not a folder" if root.exists() else "no such folder"
            raise SmoothrankError(f"--reuse {root}: {why}")
        if not (root / "runs").is_dir():
            raise SmoothrankError(f"--reuse {root}: not an experiment output folder (it has no runs/ folder)")
    return roots


def find_reusable(cells: Sequence[Cell], out_dir: str | Path, sources: Sequence[str | Path]) -> list[Reuse]:
    """What of ``sources`` (experiment output folders) the cells without a folder in ``out_dir`` can
    reuse: a finished run of the cell's fingerprint from the first folder that has one, else (a
    neural refit cell) a selection training from the first folder that has one."""
    out = Path(out_dir)
    roots = check_sources(sources)
    found = (_reusable(cell, roots) for cell in cells if roots and not (out / "runs" / cell.run_id).exists())
    return [reuse for reuse in found if reuse is not None]


def _reusable(cell: Cell, roots: Sequence[Path]) -> Reuse | None:
    have = {root: _finished_fingerprint(root / "runs" / cell.run_id) for root in roots}
    want = cell.fingerprint()
    for root in roots:
        if have[root] == want:
            return Reuse(cell, root / "runs" / cell.run_id, "run")
    if cell.kind == "neural" and cell.settings.get("refit"):
        twin = _selection_twin(cell).fingerprint()
        for root in roots:
            run_dir = root / "runs" / cell.run_id
            if have[root] == twin and (run_dir / "train" / "checkpoint.pt").is_file():
                return Reuse(cell, run_dir, "train")
    return None


def apply_reuse(reuses: Sequence[Reuse], out_dir: str | Path, *,
                log: Callable[[str], None] | None = None) -> list[Reuse]:
    """Copy each reuse into ``OUT/runs/<run id>`` and return those copied. Each is copied into
    ``OUT/.reuse-staging/`` first (emptied here first: what a killed copy left there) and then
    renamed into ``runs/``, so that no reader of ``runs/`` meets a half-copied run. A run that cannot
    be copied is left out with a warning: its cell is run instead. Call it holding the folder lock."""
    from smoothrank.experiments.results import write_json
    from smoothrank.experiments.runner import CELL_FILE

    say = log or (lambda _msg: None)
    out = Path(out_dir)
    staging = out / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    copied: list[Reuse] = []
    for reuse in reuses:
        target = out / "runs" / reuse.cell.run_id
        if target.exists():  # the folder's own run (finished or interrupted) is never replaced
            continue
        tmp = staging / reuse.cell.run_id
        try:
            if reuse.part == "run":
                shutil.copytree(reuse.source, tmp)
            else:
                shutil.copytree(reuse.source / "train", tmp / "train")
                # The training is this cell's selection training: recorded as this cell's, its
                # resume is checked against this cell's settings like any interrupted run's.
                cell = reuse.cell
                write_json(tmp / CELL_FILE, {"run_id": cell.run_id, "fingerprint": cell.fingerprint(),
                                             "identity": cell.identity()})
            os.replace(tmp, target)
        except OSError as err:  # shutil.Error is an OSError
            warnings.warn(f"--reuse: could not copy {reuse.source} ({err}); the run is made instead",
                          SmoothrankWarning, stacklevel=2)
            continue
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        copied.append(reuse)
    shutil.rmtree(staging, ignore_errors=True)
    for source in dict.fromkeys(r.source.parent.parent for r in copied):
        mine = [r for r in copied if r.source.parent.parent == source]
        runs_n = sum(r.part == "run" for r in mine)
        say(f"reused from {source}: {runs_n} finished run(s), {len(mine) - runs_n} selection training(s)")
    return copied
