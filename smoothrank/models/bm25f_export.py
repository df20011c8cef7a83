"""BM25F parameters out to a search engine: a plain JSON file and Elasticsearch/OpenSearch snippets.

Lucene-based engines do not score this module's BM25F directly:

- A per-field ``BM25`` similarity with a ``multi_match`` of type ``most_fields`` scores each field
  with its own BM25 and sums the field scores: the saturation is per field, not applied after the
  term frequencies of the fields are combined. With ``k1_f = k1 / w_f``, ``b_f`` and boost 1 on
  each field, the score of a query term found in *one* field is exactly BM25F's; a term found in
  several fields scores more than under BM25F (several saturations, each up to idf). Lucene's idf
  also counts the documents holding the term *in that field* (``df_f``, and ``N`` those holding the
  field), not in any field.
- ``combined_fields`` (Lucene's ``CombinedFieldQuery``) is closer: boosts are term-frequency
  weights applied before one saturation, with collection statistics across the fields, but it
  takes one similarity for every field (one ``k1``, one ``b``) and normalises by the weighted sum
  of the field lengths; per-field ``b`` cannot be given, so the snippet uses the mean ``b``. Since
  scaling every ``w_f`` and ``k1`` by one factor leaves BM25F unchanged, the boosts are scaled so
  that the smallest is 1 (no boost below 1, which term-frequency weights may not be in some engines)
  and ``k1`` with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from smoothrank._atomic import strict_json, write_text_atomic
from smoothrank.errors import SmoothrankError

__all__ = ["combined_fields_snippet", "most_fields_snippet", "write_parameters"]

FORMULA = ("score = sum_t idf(t) * tf~(t) / (k1 + tf~(t)), tf~(t) = sum_f w_f * tf(t,f) / "
           "(1 - b_f + b_f * len_f / avglen_f), idf = log(1 + (N - df + 0.5) / (df + 0.5))")


def _check(params: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    fields = params.get("fields")
    if not isinstance(fields, Mapping) or not fields or not isinstance(params.get("k1"), (int, float)):
        raise SmoothrankError("params: expected {'k1': number, 'fields': {name: {'weight': w, 'b': b}}}")
    return {str(f): {"weight": float(v["weight"]), "b": float(v["b"])} for f, v in fields.items()}


def most_fields_snippet(params: Mapping[str, Any]) -> dict[str, Any]:
    """Index settings with one BM25 similarity per field (``k1_f = k1 / w_f``, ``b_f``), the field
    mappings, and a ``multi_match`` query of type ``most_fields`` (see the module docstring)."""
    fields, k1 = _check(params), float(params["k1"])
    similarity = {}
    for name, value in fields.items():
        # weight 0: the field's tf never counts; a huge k1 keeps its per-field score near 0
        k1_f = k1 / value["weight"] if value["weight"] > 0 else 1e9
        similarity[f"bm25f_{name}"] = {"type": "BM25", "k1": k1_f, "b": value["b"]}
    return {
        "settings": {"index": {"similarity": similarity}},
        "mappings": {"properties": {f: {"type": "text", "similarity": f"bm25f_{f}"} for f in fields}},
        "query": {"multi_match": {"query": "{{query}}", "type": "most_fields", "fields": list(fields)}},
    }


def combined_fields_snippet(params: Mapping[str, Any]) -> dict[str, Any]:
    """Index settings with one BM25 similarity for every field and a ``combined_fields`` query with
    the field weights as boosts (scaled so that the smallest is 1; ``k1`` scaled alike; ``b`` the
    mean of the fields' ``b``)."""
    fields, k1 = _check(params), float(params["k1"])
    positive = [v["weight"] for v in fields.values() if v["weight"] > 0]
    if not positive:
        raise SmoothrankError("params: every field weight is 0")
    scale = 1.0 / min(positive)
    b = sum(v["b"] for v in fields.values()) / len(fields)
    boosted = [f"{f}^{v['weight'] * scale:.6g}" for f, v in fields.items() if v["weight"] > 0]
    return {
        "settings": {"index": {"similarity": {"default": {"type": "BM25", "k1": k1 * scale, "b": b}}}},
        "mappings": {"properties": {name: {"type": "text"} for name in fields}},
        "query": {"combined_fields": {"query": "{{query}}", "fields": boosted}},
    }


def write_parameters(params: Mapping[str, Any], out: str | Path) -> dict[str, Path]:
    """Write ``bm25f_params.json`` (the parameters, the formula, ``w_f / k1``), and the snippets
    ``elasticsearch_most_fields.json`` and ``elasticsearch_combined_fields.json`` into folder ``out``.

    ``params`` as :meth:`smoothrank.models.BM25F.parameters_dict` returns them. Returns the paths.
    """
    fields, k1 = _check(params), float(params["k1"])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plain = {"k1": k1, "fields": fields, "formula": FORMULA,
             "identifiable": {"w_over_k1": {f: v["weight"] / k1 for f, v in fields.items()},
                              "b": {f: v["b"] for f, v in fields.items()}}}
    files = {"params": out / "bm25f_params.json", "most_fields": out / "elasticsearch_most_fields.json",
             "combined_fields": out / "elasticsearch_combined_fields.json"}
    write_text_atomic(files["params"], strict_json(plain, indent=2) + "\n")
    write_text_atomic(files["most_fields"], strict_json(most_fields_snippet(params), indent=2) + "\n")
    write_text_atomic(files["combined_fields"], strict_json(combined_fields_snippet(params), indent=2) + "\n")
    return files
