"""BM25F statistics folders: a strict reader, and their packing into a :class:`Dataset`.

A statistics folder (written by :func:`smoothrank.data.bm25f_builder.build_statistics` or by hand;
format in ``docs/bm25f.md``) holds tab-separated files; blank lines and lines starting with ``#``
are skipped:

``fields.tsv``     ``field  avg_length``, one line per field, in field order (avg_length > 0)
``lengths.tsv``    ``docid  field  length``, every field of every judged document (length >= 0)
``tf.tsv``         ``qid  docid  term  field  tf`` (tf >= 0, at most the field's length)
``idf.tsv``        ``term  idf`` -- or ``df.tsv`` (``term  df``) and ``n_docs.txt`` (one integer N),
                   giving BM25's ``idf = log(1 + (N - df + 0.5) / (df + 0.5))``
``qrels.txt``      TREC qrels ``qid  iteration  docid  relevance`` (whitespace-separated)
``doc_features.tsv`` (optional) header ``docid  name1  name2 ...``, then one line per judged
                   document: query-independent features

The documents of a query are its judged documents (``qrels.txt``), in qrels order; its terms are
the terms that ``tf.tsv`` lists for it. Every problem is a :class:`DataFormatError` naming the
file and line.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from smoothrank.data.dataset import Dataset
from smoothrank.errors import DataFormatError

__all__ = ["HEADER", "BM25FData", "folder_fields", "is_bm25f_folder", "load_bm25f", "load_bm25f_splits",
           "packed_width", "read_bm25f", "read_qrels"]

#: Columns at the start of every packed row: number of fields, of query terms, of query-independent features.
HEADER = 3


def packed_width(n_fields: int, n_terms: int, n_query_independent: int = 0) -> int:
    """The number of columns of a packed BM25F row.

    ``[n_fields, n_terms, n_qi | tf (n_terms x n_fields, term-major) | len (n_fields) |
    avglen (n_fields) | idf (n_terms) | term_mask (n_terms) | query-independent (n_qi)]``.
    """
    return HEADER + n_terms * n_fields + 2 * n_fields + 2 * n_terms + n_query_independent


def is_bm25f_folder(path: str | Path) -> bool:
    """True if ``path`` is a folder holding a BM25F statistics ``fields.tsv``."""
    return Path(path).is_dir() and (Path(path) / "fields.tsv").is_file()


def folder_fields(path: str | Path) -> tuple[str, ...] | None:
    """The field names of a statistics folder's ``fields.tsv``, in order; None when ``path`` is not
    a statistics folder or its ``fields.tsv`` cannot be read (the reader reports why)."""
    if not is_bm25f_folder(path):
        return None
    try:
        return tuple(_read_fields(Path(path)))
    except (DataFormatError, OSError):
        return None


@dataclass(frozen=True)
class BM25FData:
    """The queries of a statistics folder, one entry per query in qrels order.

    Attributes
    ----------
    fields : tuple of str
    avg_lengths : np.ndarray
        float64, shape (F,).
    qids : list of str
    terms : list of list of str
        Query terms (T_q per query).
    doc_ids : list of list of str
    tf : list of np.ndarray
        float64, shape (L_q, T_q, F) per query.
    lengths : list of np.ndarray
        float64, shape (L_q, F).
    idf : list of np.ndarray
        float64, shape (T_q,).
    labels : list of np.ndarray
        float64, shape (L_q,).
    qrels_lines : list of np.ndarray
        int64, shape (L_q,): each document's line in ``qrels.txt``.
    doc_features : list of np.ndarray
        float64, shape (L_q, Q) (Q = 0 without ``doc_features.tsv``).
    feature_names : tuple of str
    source : str
    """

    fields: tuple[str, ...]
    avg_lengths: np.ndarray
    qids: list[str]
    terms: list[list[str]]
    doc_ids: list[list[str]]
    tf: list[np.ndarray]
    lengths: list[np.ndarray]
    idf: list[np.ndarray]
    labels: list[np.ndarray]
    qrels_lines: list[np.ndarray]
    doc_features: list[np.ndarray]
    feature_names: tuple[str, ...]
    source: str

    @property
    def max_terms(self) -> int:
        return max((len(t) for t in self.terms), default=0)

    def to_dataset(self, n_terms: int | None = None) -> Dataset:
        """Packed rows (:func:`packed_width`), ``n_terms`` columns per term block (default: the most
        terms of a query here); row lines are those of ``qrels.txt``."""
        n_terms = self.max_terms if n_terms is None else n_terms
        if n_terms < self.max_terms:
            raise DataFormatError(f"{self.source}: a query has {self.max_terms} terms, "
                                  f"more than n_terms={n_terms}")
        n_fields, n_qi = len(self.fields), len(self.feature_names)
        if not self.qids:
            raise DataFormatError(f"{self.source}: no query")
        blocks = []
        for q in range(len(self.qids)):
            n_docs, n_q = self.tf[q].shape[:2]
            tf = np.zeros((n_docs, n_terms, n_fields))
            tf[:, :n_q] = self.tf[q]
            idf, term_mask = np.zeros(n_terms), np.zeros(n_terms)
            idf[:n_q], term_mask[:n_q] = self.idf[q], 1.0
            columns = [np.tile([n_fields, n_terms, n_qi], (n_docs, 1)), tf.reshape(n_docs, -1),
                       self.lengths[q], np.tile(self.avg_lengths, (n_docs, 1)), np.tile(idf, (n_docs, 1)),
                       np.tile(term_mask, (n_docs, 1)), self.doc_features[q]]
            blocks.append(np.concatenate(columns, axis=1))
        sizes = [len(docs) for docs in self.doc_ids]
        return Dataset(np.concatenate(blocks).astype(np.float32),
                       np.concatenate(self.labels).astype(np.float32), np.array(self.qids, dtype=np.str_),
                       np.array([d for docs in self.doc_ids for d in docs], dtype=np.str_),
                       np.r_[0, np.cumsum(sizes)].astype(np.int64), np.concatenate(self.qrels_lines),
                       self.source)


def _lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(1-based line, tab-separated fields) of the non-blank, non-comment lines of ``path``."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: not UTF-8 text (offset {err.start})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.startswith("#"):
            yield number, line.rstrip("\r\n").split("\t")


def _columns(path: Path, names: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
    """``(where, fields)`` of each line of a tab-separated file with the columns ``names``."""
    for number, parts in _lines(path):
        where = f"{path}:{number}"
        if len(parts) != len(names):
            raise DataFormatError(f"{where}: expected {len(names)} tab-separated columns "
                                  f"({' '.join(names)}), got {len(parts)}")
        if any(not p.strip() for p in parts):
            raise DataFormatError(f"{where}: an empty column ({' '.join(names)})")
        yield where, [p.strip() for p in parts]


def _number(text: str, where: str, what: str, *, minimum: float | None = None, positive: bool = False,
            integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise DataFormatError(f"{where}: {what}: expected {kind}, got {text!r}") from None
    if not math.isfinite(value):
        raise DataFormatError(f"{where}: {what}: expected a finite number, got {text!r}")
    if positive and value <= 0:
        raise DataFormatError(f"{where}: {what}: expected a value > 0, got {text}")
    if minimum is not None and value < minimum:
        raise DataFormatError(f"{where}: {what}: expected a value >= {minimum:g}, got {text}")
    return float(value)


def _read_fields(folder: Path) -> dict[str, float]:
    path = folder / "fields.tsv"
    fields: dict[str, float] = {}
    for where, (field, avg) in _columns(path, ("field", "avg_length")):
        if field in fields:
            raise DataFormatError(f"{where}: field {field!r} listed twice")
        fields[field] = _number(avg, where, f"average length of field {field!r}", positive=True)
    if not fields:
        raise DataFormatError(f"{path}: no field")
    return fields


def read_qrels(path: Path) -> dict[str, dict[str, tuple[float, int]]]:
    """TREC qrels ``qid iteration docid relevance`` as ``qid -> docid -> (relevance, line)``, in file
    order; relevance an integer >= 0; a document judged twice for one query is an error."""
    qrels: dict[str, dict[str, tuple[float, int]]] = {}
    for number, parts in _lines(path):
        where = f"{path}:{number}"
        parts = " ".join(parts).split()
        if len(parts) != 4:
            raise DataFormatError(f"{where}: expected 4 columns (qid iteration docid relevance), "
                                  f"got {len(parts)}")
        qid, _, docid, rel = parts
        docs = qrels.setdefault(qid, {})
        if docid in docs:
            raise DataFormatError(f"{where}: document {docid!r} judged twice for query {qid!r} "
                                  f"(also line {docs[docid][1]})")
        docs[docid] = (_number(rel, where, "relevance", minimum=0, integer=True), number)
    if not qrels:
        raise DataFormatError(f"{path}: no judgement")
    return qrels


def _read_lengths(folder: Path, fields: Mapping[str, float]) -> dict[str, dict[str, float]]:
    path = folder / "lengths.tsv"
    lengths: dict[str, dict[str, float]] = {}
    for where, (docid, field, length) in _columns(path, ("docid", "field", "length")):
        if field not in fields:
            raise DataFormatError(f"{where}: unknown field {field!r} (fields.tsv lists {list(fields)})")
        per_doc = lengths.setdefault(docid, {})
        if field in per_doc:
            raise DataFormatError(f"{where}: length of field {field!r} of document {docid!r} given twice")
        per_doc[field] = _number(length, where, "field length", minimum=0)
    return lengths


def _read_idf(folder: Path) -> tuple[dict[str, float], str]:
    """Term -> idf, and the file it came from."""
    idf_path, df_path, n_path = folder / "idf.tsv", folder / "df.tsv", folder / "n_docs.txt"
    if idf_path.is_file() and df_path.is_file():
        raise DataFormatError(f"{folder}: both idf.tsv and df.tsv; give one")
    idf: dict[str, float] = {}
    if idf_path.is_file():
        for where, (term, value) in _columns(idf_path, ("term", "idf")):
            if term in idf:
                raise DataFormatError(f"{where}: term {term!r} listed twice")
            idf[term] = _number(value, where, f"idf of {term!r}")
        return idf, str(idf_path)
    if not df_path.is_file():
        raise DataFormatError(f"{folder}: no idf.tsv, and no df.tsv with n_docs.txt")
    if not n_path.is_file():
        raise DataFormatError(f"{folder}: df.tsv needs n_docs.txt (the number of documents of the "
                              "collection)")
    n_docs = _number(n_path.read_text().strip(), str(n_path), "number of documents", positive=True,
                     integer=True)
    for where, (term, value) in _columns(df_path, ("term", "df")):
        if term in idf:
            raise DataFormatError(f"{where}: term {term!r} listed twice")
        df = _number(value, where, f"document frequency of {term!r}", minimum=0, integer=True)
        if df > n_docs:
            raise DataFormatError(f"{where}: document frequency {int(df)} of {term!r} exceeds "
                                  f"n_docs={int(n_docs)}")
        idf[term] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    return idf, str(df_path)


def _read_doc_features(folder: Path) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    path = folder / "doc_features.tsv"
    if not path.is_file():
        return (), {}
    lines = _lines(path)
    first = next(lines, None)
    if first is None or first[1][0].strip() != "docid" or len(first[1]) < 2:
        raise DataFormatError(f"{path}:{first[0] if first else 1}: expected a header 'docid<TAB>name...'")
    names = tuple(p.strip() for p in first[1][1:])
    values: dict[str, np.ndarray] = {}
    for number, parts in lines:
        where = f"{path}:{number}"
        if len(parts) != len(names) + 1:
            raise DataFormatError(f"{where}: expected {len(names) + 1} columns (docid and "
                                  f"{', '.join(names)}), got {len(parts)}")
        docid = parts[0].strip()
        if docid in values:
            raise DataFormatError(f"{where}: document {docid!r} listed twice")
        values[docid] = np.array([_number(p, where, name) for p, name in zip(parts[1:], names, strict=True)])
    return names, values


def _read_tf(path: Path, qrels: Mapping[str, Mapping[str, tuple[float, int]]], fields: Mapping[str, float],
             lengths: Mapping[str, Mapping[str, float]], idf: Mapping[str, float], idf_source: str
             ) -> dict[str, dict[tuple[str, str, str], float]]:
    """Qid -> (docid, term, field) -> tf, every row checked against the other files."""
    table: dict[str, dict[tuple[str, str, str], float]] = {}
    seen: dict[tuple[str, str, str, str], str] = {}
    for where, (qid, docid, term, field, text) in _columns(path, ("qid", "docid", "term", "field", "tf")):
        if qid not in qrels:
            raise DataFormatError(f"{where}: query {qid!r} has no judgement in qrels.txt")
        if docid not in qrels[qid]:
            raise DataFormatError(f"{where}: document {docid!r} is not judged for query {qid!r} in qrels.txt")
        if field not in fields:
            raise DataFormatError(f"{where}: unknown field {field!r} (fields.tsv lists {list(fields)})")
        if docid not in lengths:
            raise DataFormatError(f"{where}: unknown document {docid!r} (not in lengths.tsv)")
        if term not in idf:
            raise DataFormatError(f"{where}: term {term!r} has no idf (not in {idf_source})")
        key = (qid, docid, term, field)
        if key in seen:
            raise DataFormatError(f"{where}: repeats {seen[key]} (query {qid!r}, document {docid!r}, "
                                  f"term {term!r}, field {field!r})")
        seen[key] = where
        tf = _number(text, where, "tf", minimum=0)
        length = lengths[docid].get(field)
        if length is not None and tf > length:
            raise DataFormatError(f"{where}: tf {text} exceeds the length {length:g} of field {field!r} of "
                                  f"document {docid!r} (lengths.tsv)")
        table.setdefault(qid, {})[(docid, term, field)] = tf
    return table


def read_bm25f(folder: str | Path) -> BM25FData:
    """Read and check a BM25F statistics folder (module docstring; ``docs/bm25f.md``).

    Raises
    ------
    DataFormatError
        Naming the file and line of the first problem.
    FileNotFoundError
        A required file is missing.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(2, "No such BM25F statistics folder", str(folder))
    for name in ("fields.tsv", "lengths.tsv", "tf.tsv", "qrels.txt"):
        if not (folder / name).is_file():
            raise FileNotFoundError(2, "Missing file of a BM25F statistics folder", str(folder / name))
    fields = _read_fields(folder)
    qrels = read_qrels(folder / "qrels.txt")
    lengths = _read_lengths(folder, fields)
    idf, idf_source = _read_idf(folder)
    names, doc_features = _read_doc_features(folder)
    table = _read_tf(folder / "tf.tsv", qrels, fields, lengths, idf, idf_source)
    return _assemble(folder, fields, qrels, lengths, idf, table, names, doc_features)


def _assemble(folder: Path, fields: Mapping[str, float], qrels: Mapping[str, Mapping[str, tuple[float, int]]],
              lengths: Mapping[str, Mapping[str, float]], idf: Mapping[str, float],
              table: Mapping[str, Mapping[tuple[str, str, str], float]], names: tuple[str, ...],
              doc_features: Mapping[str, np.ndarray]) -> BM25FData:
    field_index = {f: i for i, f in enumerate(fields)}
    keys = ("terms", "doc_ids", "tf", "lengths", "idf", "labels", "lines", "qi")
    out: dict[str, list] = {k: [] for k in keys}
    qrels_path = folder / "qrels.txt"
    for qid, docs in qrels.items():
        rows = table.get(qid, {})
        terms = list(dict.fromkeys(term for _, term, _ in rows))
        term_index = {t: i for i, t in enumerate(terms)}
        doc_index = {d: i for i, d in enumerate(docs)}
        tf = np.zeros((len(docs), len(terms), len(fields)))
        for (docid, term, field), value in rows.items():
            tf[doc_index[docid], term_index[term], field_index[field]] = value
        doc_lengths = np.zeros((len(docs), len(fields)))
        for docid, i in doc_index.items():
            where = f"{qrels_path}:{docs[docid][1]}"
            if docid not in lengths:
                raise DataFormatError(f"{where}: unknown document {docid!r} (not in lengths.tsv)")
            missing = [f for f in fields if f not in lengths[docid]]
            if missing:
                raise DataFormatError(f"{where}: document {docid!r} has no length for field(s) {missing} "
                                      "(lengths.tsv)")
            doc_lengths[i] = [lengths[docid][f] for f in fields]
            if names and docid not in doc_features:
                raise DataFormatError(f"{where}: document {docid!r} has no line in doc_features.tsv")
        out["terms"].append(terms)
        out["doc_ids"].append(list(docs))
        out["tf"].append(tf)
        out["lengths"].append(doc_lengths)
        out["idf"].append(np.array([idf[t] for t in terms]))
        out["labels"].append(np.array([docs[d][0] for d in docs]))
        out["lines"].append(np.array([docs[d][1] for d in docs], dtype=np.int64))
        out["qi"].append(np.stack([doc_features[d] for d in docs]) if names else np.zeros((len(docs), 0)))
    return BM25FData(tuple(fields), np.array(list(fields.values())), list(qrels), out["terms"],
                     out["doc_ids"], out["tf"], out["lengths"], out["idf"], out["labels"], out["lines"],
                     out["qi"], names, str(qrels_path))


def load_bm25f(folder: str | Path, *, n_terms: int | None = None) -> Dataset:
    """A statistics folder as a :class:`Dataset` of packed BM25F rows (:func:`packed_width`), the
    input of :class:`smoothrank.models.BM25F`; ``n_terms`` as in :meth:`BM25FData.to_dataset`."""
    return read_bm25f(folder).to_dataset(n_terms)


def load_bm25f_splits(folders: Mapping[str, str | Path]) -> dict[str, Dataset]:
    """Several statistics folders (train, valid, test) packed with the same number of term columns
    (the most of any query of any of them), so that one model reads them all; they must list the
    same fields, in the same order, and the same query-independent features."""
    read = {name: read_bm25f(path) for name, path in folders.items()}
    first_name, first = next(iter(read.items()))
    for name, data in read.items():
        if data.fields != first.fields or data.feature_names != first.feature_names:
            raise DataFormatError(f"data.{name} ({data.source}): fields {list(data.fields)} and "
                                  f"query-independent features {list(data.feature_names)}, but "
                                  f"data.{first_name} has "
                                  f"{list(first.fields)} and {list(first.feature_names)}")
    n_terms = max(data.max_terms for data in read.values())
    return {name: data.to_dataset(n_terms) for name, data in read.items()}
