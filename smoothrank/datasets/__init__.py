"""Datasets bundled with the package (LETOR 4.0 MQ2008) and synthetic ones (:mod:`.synthetic`).

The five MQ2008 partitions S1..S5 are shipped once (gzip, about 1.8 MB); Fold1..Fold5
train/vali/test are assembled on load by concatenating partitions as the official
``readme.txt`` says, after verifying each partition's SHA-256. The assembled text is
byte-identical to the official fold files.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal, overload

from smoothrank._checks import check_bool
from smoothrank.data.bm25f import is_bm25f_folder, load_bm25f_splits
from smoothrank.data.dataset import Dataset
from smoothrank.data.letor import load_letor, load_stored_text
from smoothrank.data.missing import WithMissing, apply_null_value, check_null_value
from smoothrank.datasets.synthetic import SyntheticRanking, make_synthetic, write_synthetic_letor
from smoothrank.errors import IndexBaseError, SmoothrankError

__all__ = ["DATA_KEYS", "MQ2008_FOLDS", "SyntheticRanking", "data_section_problem", "load_mq2008",
           "load_splits", "make_synthetic", "mq2008_text", "write_synthetic_letor"]

#: SHA-256 of each decompressed partition.
MQ2008_SHA256 = {
    "S1": "cbd42504549a2388f6c0aefdb506f22074225b574c7a5df10194174c9b00e4e0",
    "S2": "055ac792cb8f7d5a029090b8acbfb6c57323339d1371251bf2465ac182aa8605",
    "S3": "a03fe2b6e76479de60fecdb37d560a40a4e899b0cd685553d2da31ea205af1ab",
    "S4": "a239850bc6fe960ad08c2b7b0d99db90fe976dd93a15358e98036591b4e7a2ac",
    "S5": "c68c52feb1ecae7f17b64c8e2fda2098302681bbd4ea5fad8c73a1d32a1cf2b2",
}

#: Partitions of each fold's split, in concatenation order (MQ2008 readme.txt).
MQ2008_FOLDS = {
    1: {"train": ("S1", "S2", "S3"), "vali": ("S4",), "test": ("S5",)},
    2: {"train": ("S2", "S3", "S4"), "vali": ("S5",), "test": ("S1",)},
    3: {"train": ("S3", "S4", "S5"), "vali": ("S1",), "test": ("S2",)},
    4: {"train": ("S4", "S5", "S1"), "vali": ("S2",), "test": ("S3",)},
    5: {"train": ("S5", "S1", "S2"), "vali": ("S3",), "test": ("S4",)},
}
SPLITS = ("train", "vali", "test")
_SPLIT_ALIASES = {"train": "train", "vali": "vali", "valid": "vali", "validation": "vali", "test": "test"}


def _check_fold_split(fold: int, split: str) -> tuple[int, str]:
    if isinstance(fold, bool) or fold not in MQ2008_FOLDS:
        raise SmoothrankError(f"fold: expected 1, 2, 3, 4 or 5, got {fold!r}")
    if split not in _SPLIT_ALIASES:
        raise SmoothrankError(f"split: expected one of {SPLITS}, got {split!r}")
    return int(fold), _SPLIT_ALIASES[split]


def _partition(name: str) -> bytes:
    resource = resources.files(__name__).joinpath("data", "MQ2008", f"{name}.txt.gz")
    data = gzip.decompress(resource.read_bytes())
    if hashlib.sha256(data).hexdigest() != MQ2008_SHA256[name]:
        raise SmoothrankError(f"the bundled MQ2008 partition {name} is damaged (SHA-256 mismatch); "
                              "reinstall smoothrank")
    return data


def mq2008_text(fold: int = 1, split: str = "train") -> bytes:
    """The text of MQ2008 ``Fold{fold}/{split}.txt``, assembled from the bundled partitions."""
    fold, split = _check_fold_split(fold, split)
    return b"".join(_partition(name) for name in MQ2008_FOLDS[fold][split])


def load_mq2008(fold: int = 1, split: str = "train", *, path: str | os.PathLike[str] | None = None,
                cache: bool | None = None) -> Dataset:
    """LETOR 4.0 MQ2008 ``Fold{fold}`` ``split`` ("train", "vali" or "test") as a :class:`Dataset`.

    ``path``, when given, always wins over the bundled copy: a fold file, or a folder holding
    ``Fold{k}/{split}.txt[.gz]`` (the official layout; an ``MQ2008/`` sub-folder also works).
    ``cache`` as in :func:`smoothrank.data.load_letor` (the bundled folds are cached by default).
    MQ2008: 784 queries, 15,211 documents, 46 features, labels 0/1/2.

    Examples
    --------
    >>> from smoothrank.datasets import load_mq2008
    >>> test = load_mq2008(1, "test", cache=False)
    >>> test.n_queries, test.n_docs, test.n_features
    (156, 2874, 46)
    """
    fold, split = _check_fold_split(fold, split)
    if cache is not None:
        check_bool(cache, "cache")  # a truthy "no" would mean yes
    if path is not None:
        return load_letor(_user_file(Path(path), fold, split), cache=cache)
    source = f"MQ2008 Fold{fold}/{split}.txt (bundled)"
    names = MQ2008_FOLDS[fold][split]
    text = mq2008_text(fold, split)  # verifies the checksums even when the cache answers
    name = f"MQ2008 Fold{fold}/{split} " + "+".join(MQ2008_SHA256[n][:16] for n in names)
    # a damaged entry is parsed again and replaced, as by load_letor
    return load_stored_text(name, text, source=source, cache=cache is not False)


def _user_file(path: Path, fold: int, split: str) -> Path:
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(2, "No such file or directory (MQ2008 path)", str(path))
    for root in (path, path / "MQ2008"):
        for suffix in (".txt", ".txt.gz"):
            candidate = root / f"Fold{fold}" / f"{split}{suffix}"
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(2, f"No Fold{fold}/{split}.txt[.gz] under the MQ2008 path", str(path))


DATA_KEYS = ("train", "valid", "test", "mq2008_fold", "n_features", "null_value")


def data_section_problem(data: Mapping[str, Any]) -> str | None:
    """What is wrong with the sources named by a ``data`` section (None: nothing), the one rule of
    the training config, the experiment runner and :func:`load_splits`: the bundled fold
    ``mq2008_fold`` or a ``train`` file, not both (a user's file must never be silently passed
    over for the bundled data), and no key outside :data:`DATA_KEYS`."""
    unknown = sorted(set(data) - set(DATA_KEYS))
    if unknown:
        return f"data: unknown key(s) {unknown}; expected some of {list(DATA_KEYS)}"
    if data.get("mq2008_fold") is None and data.get("train") is None:
        return "give either data.train (a LETOR file) or data.mq2008_fold (bundled data)"
    files = [data.get(k) for k in ("train", "valid", "test")]
    if data.get("mq2008_fold") is not None and any(f is not None for f in files):
        return "data.mq2008_fold and data.train/valid/test are exclusive"
    return None


@overload
def load_splits(data: Mapping[str, Any], *, missing_ok: Literal[False] = False) -> dict[str, Dataset]: ...


@overload
def load_splits(data: Mapping[str, Any], *, missing_ok: bool) -> dict[str, Dataset | WithMissing]: ...


def load_splits(data: Mapping[str, Any], *, missing_ok: bool = False) -> dict[str, Dataset] | dict[
        str, Dataset | WithMissing]:
    """The ``train``/``valid``/``test`` datasets of a config's ``data`` section: the bundled MQ2008
    fold ``mq2008_fold``, or the LETOR files ``train`` (required), ``valid`` and ``test``, or BM25F
    statistics folders in their place (all of them; ``docs/bm25f.md``), packed alike.

    The training file fixes the feature count of the others (a sparse file may stop at a lower
    index), from ``n_features`` when given, and whether their indices start at 0 or 1 (its
    ``index_base``). A missing file is an error naming its field
    (``data.valid``) and, for a relative path, the folder it was looked for in; so is a section
    that names both sources, neither, or an unknown key (:func:`data_section_problem`).

    ``null_value`` (LETOR 3.0's ``NULL`` features): a number fills them (default 0.0), with a
    warning saying how many; ``"nan"`` keeps them missing, for the GBDT baselines
    (``missing_ok=True``: such a split is a :class:`smoothrank.data.missing.WithMissing`), and is
    refused for the others (:func:`smoothrank.data.missing.apply_null_value`).
    """
    problem = data_section_problem(data)
    if problem is not None:
        raise SmoothrankError(problem)
    if data.get("mq2008_fold") is not None:
        fold = data["mq2008_fold"]
        return {"train": load_mq2008(fold, "train"), "valid": load_mq2008(fold, "vali"),
                "test": load_mq2008(fold, "test")}
    named = {split: data[split] for split in ("train", "valid", "test") if data.get(split) is not None}
    folders = [split for split, path in named.items() if is_bm25f_folder(path)]
    if folders:
        if data.get("n_features") is not None:
            raise SmoothrankError("data.n_features: BM25F statistics folders fix their own width; "
                                  "leave it out")
        return _bm25f_splits(named, folders)
    splits: dict[str, Dataset | WithMissing] = {}
    n_features = data.get("n_features")
    null_value = check_null_value(data.get("null_value"), "data.null_value")
    zero_based: bool | str = "auto"
    for split in ("train", "valid", "test"):
        path = data.get(split)
        if path is None:
            continue
        _check_exists(Path(path), f"data.{split}")
        try:
            def read(*, null_value: float, path: Any = path, n_features: Any = n_features,
                     zero_based: Any = zero_based) -> Dataset:
                return load_letor(path, n_features=n_features, zero_based=zero_based, null_value=null_value)

            splits[split] = apply_null_value(path, read, null_value, f"data.{split}", missing_ok=missing_ok)
        except IndexBaseError as err:
            # Only these are about zero_based, which the config did not set: a NaN or a bad label is not.
            if zero_based == "auto":
                raise
            raise IndexBaseError(f"{err} (data.{split} is read with the feature indices of data.train, "
                                  f"which start at {splits['train'].index_base})") from None
        n_features = splits["train"].n_features
        # Each file alone would guess its own base: a zero-based file without a "0:" token (sklearn's
        # dump_svmlight_file leaves out zeros) would be read one column to the left of the training file.
        if splits["train"].index_base is not None:
            zero_based = splits["train"].index_base == 0
    return splits


def _bm25f_splits(named: Mapping[str, Any], folders: list[str]) -> dict[str, Dataset]:
    """BM25F statistics folders (docs/bm25f.md), every split one, packed alike."""
    others = [split for split in named if split not in folders]
    if others:
        raise SmoothrankError(f"data.{folders[0]} is a BM25F statistics folder but data.{others[0]} is not "
                              "(every split must be one)")
    return load_bm25f_splits({split: Path(path) for split, path in named.items()})


def _check_exists(path: Path, field: str) -> None:
    if path.is_dir():  # e.g. data.train='' (the current folder) or a run folder by mistake
        raise SmoothrankError(f"{field}: {path} is a folder, not a LETOR file")
    if path.exists():
        return
    where = "" if path.is_absolute() else f" (a relative path is read from {Path.cwd()})"
    raise SmoothrankError(f"{field}: {path} does not exist{where}")
