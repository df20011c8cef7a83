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
interrupted run of the folder itself is never replaced), whole, under a temporary name, then
renamed: an interrupted reuse leaves no half-copied run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from smoothrank.errors import SmoothrankError
from smoothrank.experiments.spec import Cell

__all__ = ["Reuse", "apply_reuse", "check_sources", "find_reusable"]


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
    """The fingerprint of the finished run in ``run_dir`` (None: none, or damaged)."""
    from smoothrank.experiments.runner import RESULT_FILE, read_result

    path = run_dir / RESULT_FILE
    if not path.is_file():
        return None
    try:
        return str(read_result(path)["fingerprint"])
    except (SmoothrankError, OSError):
        return None


def check_sources(sources: Sequence[str | Path]) -> list[Path]:
    """The source folders as paths; each must be an experiment output folder (it has ``runs/``)."""
    roots = [Path(s) for s in sources]
    for root in roots:
        if not root.is_dir():
            raise SmoothrankError(f"--reuse {root}: no such folder")
        if not (root / "runs").is_dir():
            raise SmoothrankError(f"--reuse {root}: not an experiment output folder (it has no runs/ folder)")
    return roots


def find_reusable(cells: Sequence[Cell], out_dir: str | Path, sources: Sequence[str | Path]) -> list[Reuse]:
    """What of ``sources`` (experiment output folders, first match wins) the cells not yet in
    ``out_dir`` can reuse; ``out_dir`` itself among the sources is ignored."""
    out = Path(out_dir)
    roots = check_sources(sources)
    if out.exists():
        roots = [r for r in roots if not r.resolve().samefile(out.resolve())]
    if not roots:
        return []
    found: list[Reuse] = []
    for cell in cells:
        if (out / "runs" / cell.run_id).exists():
            continue
        found += _reusable(cell, roots)
    return found


def _reusable(cell: Cell, roots: Sequence[Path]) -> list[Reuse]:
    want = cell.fingerprint()
    refit = cell.kind == "neural" and cell.settings.get("refit")
    twin = _selection_twin(cell).fingerprint() if refit else None
    for root in roots:
        run_dir = root / "runs" / cell.run_id
        have = _finished_fingerprint(run_dir)
        if have is None:
            continue
        if have == want:
            return [Reuse(cell, run_dir, "run")]
        if have == twin and (run_dir / "train" / "checkpoint.pt").is_file():
            return [Reuse(cell, run_dir, "train")]
    return []


def apply_reuse(reuses: Sequence[Reuse], out_dir: str | Path, *,
                log: Callable[[str], None] | None = None) -> None:
    """Copy each reuse into ``OUT/runs/<run id>`` (under a temporary name, then renamed)."""
    from smoothrank.experiments.runner import CELL_FILE, write_json

    say = log or (lambda _msg: None)
    runs = Path(out_dir) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for reuse in reuses:
        target = runs / reuse.cell.run_id
        if target.exists():  # the folder's own run (finished or interrupted) is never replaced
            continue
        tmp = runs / f".reuse-{reuse.cell.run_id}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
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
        except OSError as err:
            raise SmoothrankError(f"--reuse: could not copy {reuse.source} to {target}: {err}") from None
        finally:  # also on Ctrl-C: no half-copied run is left behind
            shutil.rmtree(tmp, ignore_errors=True)
    for source in dict.fromkeys(r.source.parent.parent for r in reuses):
        mine = [r for r in reuses if r.source.parent.parent == source]
        runs_n = sum(r.part == "run" for r in mine)
        say(f"reused from {source}: {runs_n} finished run(s), {len(mine) - runs_n} selection training(s)")
