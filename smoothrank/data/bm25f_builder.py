"""Build BM25F statistics folders (:mod:`smoothrank.data.bm25f`) from raw text.

Inputs:

- documents: JSON Lines, one object per line, ``{"id": "d1", "title": "...", "body": "..."}``; every
  other key with a string value is a field (or only the ``fields`` asked for, in that order). Or
  TREC-style ``<DOC><DOCNO>d1</DOCNO><TITLE>...</TITLE><BODY>...</BODY></DOC>``: every tag but
  ``DOCNO`` is a field, named in lowercase. A field that a document lacks (or holds ``null``) is
  empty.
- queries: ``qid<TAB>text``, one per line.
- qrels: TREC ``qid iteration docid relevance``.

Tokenizer (:func:`tokenize`): lowercase, then maximal runs of Unicode letters and digits; every
other character separates tokens; no stemming, no stop words. Query terms are the distinct tokens
of the query text. Collection statistics are taken over every document of the file: ``n_docs``,
the document frequency of each query term (documents holding it in any field), the average length
of each field (in tokens). The documents of a query are its judged documents (qrels).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from smoothrank._atomic import write_text_atomic
from smoothrank.data.bm25f import read_qrels
from smoothrank.errors import DataFormatError

__all__ = ["build_statistics", "read_documents", "read_queries", "tokenize"]

_TOKEN = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lowercase ``text`` and split it on every character that is not a Unicode letter or digit.

    >>> tokenize("BM25F's k1, re-tuned!")
    ['bm25f', 's', 'k1', 're', 'tuned']
    """
    return _TOKEN.findall(text.lower())


def _text_lines(path: Path) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if line.strip():
            yield f"{path}:{number}", line


def _document(where: str, line: str, fields: Sequence[str] | None) -> tuple[str, dict[str, str]]:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataFormatError(f"{where}: not a JSON object ({err.msg})") from None
    if not isinstance(doc, dict):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    docid = doc.get("id")
    if isinstance(docid, bool) or not isinstance(docid, (str, int)) or not str(docid).strip():
        raise DataFormatError(f"{where}: expected a non-empty \"id\" (a string or an integer), got {docid!r}")
    names = list(fields) if fields is not None else [k for k in doc if k != "id"]
    texts = {}
    for name in names:
        value = doc.get(name)
        if value is not None and not isinstance(value, str):
            raise DataFormatError(f"{where}: field {name!r} of document {docid!r}: expected a string or "
                                  f"null, got {type(value).__name__}")
        texts[name] = value or ""
    return str(docid).strip(), texts


_TREC_DOC = re.compile(r"<DOC>(.*?)</DOC>", re.S | re.I)
_TREC_TAG = re.compile(r"<([A-Za-z][\w-]*)>(.*?)</\1>", re.S)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}: not UTF-8 text (offset {err.start})") from None


def _trec_documents(path: Path, fields: Sequence[str] | None) -> Iterator[tuple[str, str, dict[str, str]]]:
    """``(where, docid, {field: text})`` of a TREC-style file: ``<DOC><DOCNO>id</DOCNO><TITLE>...</TITLE>
    <BODY>...</BODY></DOC>``; each other tag is a field (its name lowercased, repeats joined)."""
    text, end = _read_text(path), 0
    for match in _TREC_DOC.finditer(text):
        where = f"{path}:{text.count(chr(10), 0, match.start()) + 1}"
        if text[end:match.start()].strip():
            raise DataFormatError(f"{where}: text outside <DOC>...</DOC> before this document")
        end = match.end()
        tags: dict[str, list[str]] = {}
        for tag in _TREC_TAG.finditer(match.group(1)):
            tags.setdefault(tag.group(1).lower(), []).append(tag.group(2))
        docno = [d.strip() for d in tags.pop("docno", [])]
        if len(docno) != 1 or not docno[0]:
            raise DataFormatError(f"{where}: expected one non-empty <DOCNO> in the document")
        names = list(fields) if fields is not None else list(tags)
        yield where, docno[0], {name: " ".join(tags.get(name, [])) for name in names}
    rest = text[end:]
    if rest.strip():
        where = f"{path}:{text.count(chr(10), 0, end + len(rest) - len(rest.lstrip())) + 1}"
        raise DataFormatError(f"{where}: text after the last </DOC> (an unclosed <DOC>?)")


def _jsonl_documents(path: Path, fields: Sequence[str] | None) -> Iterator[tuple[str, str, dict[str, str]]]:
    for where, line in _text_lines(path):
        docid, texts = _document(where, line, fields)
        yield where, docid, texts


def read_documents(path: str | Path, fields: Sequence[str] | None = None
                   ) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """Yield ``(docid, {field: tokens})`` for each document of a JSON Lines file, or of a TREC-style
    file (one whose first non-blank character is ``<``: ``<DOC><DOCNO>..</DOCNO><TITLE>..</TITLE>
    ..</DOC>``, tags as fields, lowercased).

    ``fields`` None: the fields of the first document (its keys other than ``id``, or its tags other
    than ``DOCNO``); every later document is read with the same fields. Raises
    :class:`DataFormatError` naming the line of a malformed document or a repeated id.
    """
    path = Path(path)
    with path.open("rb") as handle:
        trec = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")
    seen: dict[str, str] = {}
    names = list(fields) if fields is not None else None
    for where, docid, texts in (_trec_documents if trec else _jsonl_documents)(path, names):
        if names is None:
            names = list(texts)
            if not names:
                raise DataFormatError(f"{where}: the first document has no field besides its id")
        if docid in seen:
            raise DataFormatError(f"{where}: document id {docid!r} repeats {seen[docid]}")
        seen[docid] = where
        yield docid, {name: tokenize(texts.get(name, "")) for name in names}


def read_queries(path: str | Path) -> dict[str, list[str]]:
    """``qid -> distinct query terms`` (in order of first occurrence) from a ``qid<TAB>text`` file."""
    queries: dict[str, list[str]] = {}
    for where, line in _text_lines(Path(path)):
        qid, sep, text = line.partition("\t")
        if not sep or not qid.strip():
            raise DataFormatError(f"{where}: expected 'qid<TAB>text'")
        if qid.strip() in queries:
            raise DataFormatError(f"{where}: query {qid.strip()!r} listed twice")
        queries[qid.strip()] = list(dict.fromkeys(tokenize(text)))
    return queries


def _collection(documents: str | Path, fields: Sequence[str] | None, terms: set[str], judged: set[str]
                ) -> dict[str, Any]:
    """One pass over the documents: n_docs, field lengths summed, df of ``terms``, and the token
    counts of the ``judged`` documents."""
    n_docs, total, df = 0, Counter[str](), Counter[str]()
    counts: dict[str, dict[str, Counter[str]]] = {}
    names: list[str] = []
    for docid, tokens in read_documents(documents, fields):
        names = list(tokens)
        n_docs += 1
        present: set[str] = set()
        for name, toks in tokens.items():
            total[name] += len(toks)
            present.update(t for t in toks if t in terms)
        df.update(present)
        if docid in judged:
            counts[docid] = {name: Counter(toks) for name, toks in tokens.items()}
    if n_docs == 0:
        raise DataFormatError(f"{documents}: no document")
    empty = [f for f in names if total[f] == 0]
    if empty:
        raise DataFormatError(f"{documents}: field(s) {empty} empty in every document (no average length)")
    return {"n_docs": n_docs, "fields": names, "avg": {f: total[f] / n_docs for f in names}, "df": df,
            "counts": counts}


def _write_split(out: Path, stats: Mapping[str, Any], queries: Mapping[str, list[str]],
                 qrels: Mapping[str, Mapping[str, tuple[float, int]]]) -> dict[str, int]:
    fields, counts = stats["fields"], stats["counts"]
    out.mkdir(parents=True, exist_ok=True)
    kept = [qid for qid in qrels if qid in queries]
    terms = sorted({t for qid in kept for t in queries[qid]})
    docs = list(dict.fromkeys(d for qid in kept for d in qrels[qid]))
    tf_lines, qrels_lines = ["# qid\tdocid\tterm\tfield\ttf"], []
    for qid in kept:
        for docid, (rel, _) in qrels[qid].items():
            qrels_lines.append(f"{qid} 0 {docid} {int(rel)}")
            for term in queries[qid]:
                for field in fields:
                    tf = counts[docid][field][term]
                    if tf:
                        tf_lines.append(f"{qid}\t{docid}\t{term}\t{field}\t{tf}")
    lengths = ["# docid\tfield\tlength"]
    lengths += [f"{d}\t{f}\t{sum(counts[d][f].values())}" for d in docs for f in fields]
    write_text_atomic(out / "fields.tsv", "# field\tavg_length\n"
                      + "".join(f"{f}\t{stats['avg'][f]!r}\n" for f in fields))
    write_text_atomic(out / "lengths.tsv", "\n".join(lengths) + "\n")
    write_text_atomic(out / "tf.tsv", "\n".join(tf_lines) + "\n")
    write_text_atomic(out / "df.tsv", "# term\tdf\n" + "".join(f"{t}\t{stats['df'][t]}\n" for t in terms))
    write_text_atomic(out / "n_docs.txt", f"{stats['n_docs']}\n")
    write_text_atomic(out / "qrels.txt", "\n".join(qrels_lines) + "\n")
    return {"queries": len(kept), "documents": len(docs), "tf_rows": len(tf_lines) - 1}


def build_statistics(documents: str | Path, queries: str | Path | Mapping[str, str | Path], qrels: str | Path,
                     out: str | Path, *, fields: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
    """Write BM25F statistics folders from raw text (module docstring; ``docs/bm25f.md``).

    Parameters
    ----------
    documents : path
        JSON Lines documents.
    queries : path or mapping name -> path
        ``qid<TAB>text`` files. A single file writes ``out``; a mapping (``{"train": ..., "valid":
        ...}``) writes one folder ``out/name`` per file, with the same collection statistics.
    qrels : path
        TREC qrels; only queries of ``queries`` are kept.
    out : path
    fields : sequence of str, optional
        The fields to index, in this order (default: those of the first document).

    Returns
    -------
    dict
        Per written folder (key ``""`` for a single file): number of queries, documents, tf rows.
    """
    if isinstance(queries, (str, Path)):
        named = {"": Path(queries)}
    else:
        named = {k: Path(v) for k, v in queries.items()}
    read = {name: read_queries(path) for name, path in named.items()}
    judgements = read_qrels(Path(qrels))
    for name, qs in read.items():
        if not any(qid in judgements for qid in qs):
            raise DataFormatError(f"{named[name]}: no query of this file is judged in {qrels}")
    wanted = {qid for qs in read.values() for qid in qs}
    terms = {t for qs in read.values() for q in qs.values() for t in q}
    judged = {d for qid in wanted & set(judgements) for d in judgements[qid]}
    stats = _collection(documents, fields, terms, judged)
    missing = judged - set(stats["counts"])
    if missing:
        qid = next(q for q in judgements if q in wanted and missing & set(judgements[q]))
        docid = next(d for d in judgements[qid] if d in missing)
        raise DataFormatError(f"{qrels}:{judgements[qid][docid][1]}: document {docid!r} is not in "
                              f"{documents}")
    return {name: _write_split(Path(out) / name, stats, read[name], judgements) for name in named}
