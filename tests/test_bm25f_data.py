"""BM25F statistics: the builder from raw text, the strict reader, and the command line end to end."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from smoothrank.cli import main
from smoothrank.data.bm25f import load_bm25f, packed_width, read_bm25f
from smoothrank.data.bm25f_builder import build_statistics, tokenize
from smoothrank.datasets import load_splits
from smoothrank.errors import ConfigError, DataFormatError, SmoothrankError
from smoothrank.models import BM25F
from smoothrank.training.config import config_from_dict

DOCS = [
    {"id": "d1", "title": "Learning to Rank", "body": "ranking with smooth metrics; learning"},
    {"id": "d2", "title": "Cooking pasta", "body": "boil water, add pasta and rank the sauces"},
    {"id": "d3", "title": None, "body": "learning rank rank rank"},
    {"id": "d4", "title": "Rank", "body": "nothing here"},
    {"id": "d5", "title": "Sauce", "body": "a pasta sauce, a rank of sauces"},
]


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "train.tsv").write_text("q1\tLearning to rank\nq2\tpasta sauce\n")
    (tmp_path / "valid.tsv").write_text("q3\trank\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 2\nq1 0 d2 0\nq1 0 d3 1\nq2 0 d2 1\nq2 0 d4 0\nq2 0 d5 2\n"
                                        "q3 0 d4 1\nq3 0 d2 0\nq3 0 d5 0\n")
    return tmp_path


def test_tokenizer_lowercases_and_splits_on_non_alphanumerics():
    assert tokenize("BM25F's k1, re-tuned! Ünïcode_x") == ["bm25f", "s", "k1", "re", "tuned", "ünïcode", "x"]


def test_builder_writes_the_collection_statistics_the_reader_reads(corpus):
    queries = {"train": corpus / "train.tsv", "valid": corpus / "valid.tsv"}
    summary = build_statistics(corpus / "docs.jsonl", queries, corpus / "qrels.txt", corpus / "stats")
    assert summary["train"] == {"queries": 2, "documents": 5, "tf_rows": 12}
    data = read_bm25f(corpus / "stats" / "train")
    assert data.fields == ("title", "body") and data.qids == ["q1", "q2"]
    # title lengths 3, 2, 0, 1, 1 over 5 documents; body 5, 8, 4, 2, 7
    np.testing.assert_allclose(data.avg_lengths, [7 / 5, 26 / 5])
    assert data.terms[0] == ["learning", "to", "rank"]
    q1 = data.tf[0]  # documents d1, d2, d3
    np.testing.assert_array_equal(q1[2], [[0, 1], [0, 0], [0, 3]])  # d3: learning, to, rank in title/body
    np.testing.assert_array_equal(data.lengths[0][2], [0, 4])
    # df of "rank": d1 (title), d2, d3, d4, d5 = 5 of 5 documents
    assert data.idf[0][2] == pytest.approx(math.log(1 + 0.5 / 5.5))
    np.testing.assert_array_equal(data.labels[1], [1, 0, 2])
    dataset = data.to_dataset()
    assert dataset.n_features == packed_width(2, 3) and dataset.n_queries == 2
    assert list(dataset.line_numbers) == [1, 2, 3, 4, 5, 6]  # lines of the folder's qrels.txt


def test_splits_are_packed_with_the_same_number_of_terms(corpus):
    build_statistics(corpus / "docs.jsonl", {"train": corpus / "train.tsv", "valid": corpus / "valid.tsv"},
                     corpus / "qrels.txt", corpus / "stats")
    splits = load_splits({"train": str(corpus / "stats/train"), "valid": str(corpus / "stats/valid")})
    assert splits["train"].n_features == splits["valid"].n_features == packed_width(2, 3)
    assert load_bm25f(corpus / "stats/valid").n_features == packed_width(2, 1)
    with pytest.raises(SmoothrankError, match=r"data\.train is a BM25F statistics folder but data\.valid"):
        load_splits({"train": str(corpus / "stats/train"), "valid": str(corpus / "qrels.txt")})


def _stats(corpus):
    build_statistics(corpus / "docs.jsonl", corpus / "train.tsv", corpus / "qrels.txt", corpus / "stats")
    return corpus / "stats"


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


BAD_STATS = [
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td3\trank\tbody\t-3", r"tf.tsv:\d+: tf: expected a value >= 0"),
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td3\trank\tbody\t9", r"tf.tsv:\d+: tf 9 exceeds the length 4"),
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td3\trank\tanchor\t3", r"tf.tsv:\d+: unknown field 'anchor'"),
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td9\trank\tbody\t3", r"tf.tsv:\d+: document 'd9' is not judged"),
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td3\trank\tbody", r"tf.tsv:\d+: expected 5 tab-separated"),
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td3\tzebra\tbody\t3", r"tf.tsv:\d+: term 'zebra' has no idf"),
    ("tf.tsv", "q1\td3\trank\tbody\t3", "q1\td3\trank\tbody\t3\nq1\td3\trank\tbody\t3",
     r"tf.tsv:\d+: repeats"),
    ("fields.tsv", "title\t1.4", "title\t0", r"fields.tsv:2: average length of field 'title': expected a"),
    ("fields.tsv", "title\t1.4", "title\t-2", r"fields.tsv:2: .* expected a value > 0"),
    ("lengths.tsv", "d3\tbody\t4\n", "", r"qrels.txt:3: document 'd3' has no length for field\(s\) \['body"),
    ("lengths.tsv", "d3\ttitle\t0\nd3\tbody\t4\n", "", r"tf.tsv:\d+: unknown document 'd3' \(not in lengths"),
    ("lengths.tsv", "d3\tbody\t4", "d3\tbody\tfour", r"lengths.tsv:\d+: field length: expected a number"),
    ("df.tsv", "rank\t5", "rank\t6", r"df.tsv:\d+: document frequency 6 of 'rank' exceeds n_docs"),
    ("n_docs.txt", "5", "0", r"n_docs.txt: number of documents: expected a value > 0"),
    ("qrels.txt", "q1 0 d2 0", "q1 0 d2", r"qrels.txt:2: expected 4 columns"),
    ("qrels.txt", "q1 0 d2 0", "q1 0 d1 0", r"qrels.txt:2: document 'd1' judged twice .*also line 1"),
    ("qrels.txt", "q1 0 d2 0", "q1 0 d2 -1", r"qrels.txt:2: relevance: expected a value >= 0"),
]


@pytest.mark.parametrize(("name", "old", "new", "message"), BAD_STATS)
def test_bad_statistics_are_errors_naming_file_and_line(corpus, name, old, new, message):
    stats = _stats(corpus)
    _edit(stats / name, old, new)
    with pytest.raises(DataFormatError, match=message):
        read_bm25f(stats)


def test_idf_files_are_one_or_the_other(corpus):
    stats = _stats(corpus)
    (stats / "idf.tsv").write_text("rank\t0.1\n")
    with pytest.raises(DataFormatError, match=r"both idf\.tsv and df\.tsv"):
        read_bm25f(stats)
    (stats / "df.tsv").unlink()
    (stats / "idf.tsv").write_text("rank\t0.1\nlearning\t1.5\nto\t1.0\npasta\t2\nsauce\tnan\n")
    with pytest.raises(DataFormatError, match=r"idf.tsv:5: idf of 'sauce': expected a finite number"):
        read_bm25f(stats)
    (stats / "idf.tsv").write_text("rank\t0.1\nlearning\t1.5\nto\t1.0\npasta\t2\nsauce\t3\n")
    assert read_bm25f(stats).idf[0].tolist() == [1.5, 1.0, 0.1]
    (stats / "tf.tsv").unlink()
    with pytest.raises(FileNotFoundError, match=r"tf\.tsv"):
        read_bm25f(stats)


@pytest.mark.parametrize(("line", "message"), [
    ('{"id": "d1", "title": 3}', r"docs.jsonl:1: field 'title' of document 'd1': expected a string or null"),
    ('{"title": "x"}', r"docs.jsonl:1: expected a non-empty \"id\""),
    ("[1, 2]", r"docs.jsonl:1: expected a JSON object, got list"),
    ("{oops", r"docs.jsonl:1: not a JSON object"),
])
def test_bad_documents_are_errors_naming_the_line(corpus, line, message):
    (corpus / "docs.jsonl").write_text(line + "\n")
    with pytest.raises(DataFormatError, match=message):
        _stats(corpus)


def test_trec_style_documents_give_the_same_statistics_as_json_lines(corpus):
    build_statistics(corpus / "docs.jsonl", corpus / "train.tsv", corpus / "qrels.txt", corpus / "from_jsonl")
    trec = "".join(f"<DOC>\n<DOCNO> {d['id']} </DOCNO>\n"
                   + (f"<TITLE>{d['title']}</TITLE>\n" if d["title"] else "")
                   + f"<BODY>{d['body']}</BODY>\n</DOC>\n" for d in DOCS)  # 24 lines
    (corpus / "docs.trec").write_text(trec)
    build_statistics(corpus / "docs.trec", corpus / "train.tsv", corpus / "qrels.txt", corpus / "from_trec",
                     fields=["title", "body"])
    for name in ("fields.tsv", "lengths.tsv", "tf.tsv", "df.tsv", "n_docs.txt", "qrels.txt"):
        assert (corpus / "from_trec" / name).read_text() == (corpus / "from_jsonl" / name).read_text(), name
    (corpus / "docs.trec").write_text(trec + "<DOC>\n<TITLE>no number</TITLE>\n</DOC>\n")
    with pytest.raises(DataFormatError, match=r"docs.trec:25: expected one non-empty <DOCNO>"):
        build_statistics(corpus / "docs.trec", corpus / "train.tsv", corpus / "qrels.txt", corpus / "x")
    (corpus / "docs.trec").write_text(trec + "<DOC>\n<DOCNO>d9</DOCNO>\n")
    with pytest.raises(DataFormatError, match=r"docs.trec:25: text after the last </DOC>"):
        build_statistics(corpus / "docs.trec", corpus / "train.tsv", corpus / "qrels.txt", corpus / "x")


def test_builder_refuses_a_field_empty_everywhere(corpus):
    with pytest.raises(DataFormatError, match=r"field\(s\) \['anchor'\] empty in every document"):
        build_statistics(corpus / "docs.jsonl", corpus / "train.tsv", corpus / "qrels.txt", corpus / "stats",
                         fields=["title", "anchor"])


def test_builder_refuses_repeated_ids_and_judged_documents_missing_from_the_collection(corpus):
    docs = (corpus / "docs.jsonl").read_text()
    (corpus / "docs.jsonl").write_text(docs + json.dumps(DOCS[0]) + "\n")
    with pytest.raises(DataFormatError, match=r"docs.jsonl:6: document id 'd1' repeats .*docs.jsonl:1"):
        _stats(corpus)
    (corpus / "docs.jsonl").write_text(docs)
    _edit(corpus / "qrels.txt", "q1 0 d2 0", "q1 0 d7 0")
    with pytest.raises(DataFormatError, match=r"qrels.txt:2: document 'd7' is not in .*docs.jsonl"):
        _stats(corpus)


def test_command_line_build_train_export_evaluate(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bm25f", "build", "--documents", "docs.jsonl", "--queries", "train=train.tsv",
                 "--queries", "valid=valid.tsv", "--qrels", "qrels.txt", "--out", "stats"]) == 0
    assert "stats/train: 2 queries, 5 documents, 12 tf_rows" in capsys.readouterr().out
    (tmp_path / "config.yaml").write_text(
        "data: {train: stats/train, valid: stats/valid}\n"
        "model: {kind: bm25f, fields: [title, body]}\n"
        "loss: {name: soft_ndcg, options: {sigma: 0.1}}\n"
        "optimizer: {lr: 0.05}\n"
        "training: {epochs: 2, batch_size: 2, list_size: 5}\n"
        "evaluation: {metrics: [ndcg@3], select_by: ndcg@3, convention: trec}\n"
        "output: {run_dir: run}\n")
    assert main(["train", "config.yaml", "--quiet"]) == 0
    # NeuralNDCG trains it too (the loss of the NeuralNDCG paper; soft_ndcg is the SoftRank paper's)
    assert main(["train", "config.yaml", "--quiet", "loss.name=neural_ndcg", "loss.options={}",
                 "output.run_dir=run_neural", "training.epochs=1"]) == 0
    assert (tmp_path / "run_neural" / "model.pt").is_file()
    assert main(["bm25f", "export", "run", "--out", "engine"]) == 0
    params = json.loads((tmp_path / "engine" / "bm25f_params.json").read_text())
    assert set(params["fields"]) == {"title", "body"} and params["k1"] > 0
    snippet = json.loads((tmp_path / "engine" / "elasticsearch_most_fields.json").read_text())
    assert set(snippet["settings"]["index"]["similarity"]) == {"bm25f_title", "bm25f_body"}
    capsys.readouterr()
    assert main(["bm25f", "evaluate", "stats/valid", "--params", "engine/bm25f_params.json",
                 "--metrics", "ndcg@3", "--convention", "trec"]) == 0
    assert "stats/valid [trec convention]: ndcg@3=" in capsys.readouterr().out
    # a statistics folder of other fields is refused with the fields named
    shutil.copytree(tmp_path / "stats" / "valid", tmp_path / "other")
    _edit(tmp_path / "other" / "fields.tsv", "title\t", "heading\t")
    (tmp_path / "other" / "lengths.tsv").write_text((tmp_path / "other" / "lengths.tsv").read_text()
                                                    .replace("\ttitle\t", "\theading\t"))
    (tmp_path / "other" / "tf.tsv").write_text((tmp_path / "other" / "tf.tsv").read_text()
                                               .replace("\ttitle\t", "\theading\t"))
    assert main(["bm25f", "evaluate", "other", "--params", "engine/bm25f_params.json"]) == 2
    assert "--params: fields ['body', 'title'], but other has ['heading', 'body']" in capsys.readouterr().err


def test_query_independent_features_are_read_and_scored(corpus):
    stats = _stats(corpus)
    rows = "".join(f"d{i}\t0.{i}\n" for i in range(1, 6))
    (stats / "doc_features.tsv").write_text("docid\tpagerank\n" + rows)
    data = read_bm25f(stats)
    assert data.feature_names == ("pagerank",)
    np.testing.assert_allclose(data.doc_features[1][:, 0], [0.2, 0.4, 0.5])  # q2: d2, d4, d5
    dataset = data.to_dataset()
    assert dataset.n_features == packed_width(2, 3, 1)
    model = BM25F(dataset.n_features, fields=data.fields, query_independent=1, hidden=3)
    scores = model(torch.as_tensor(dataset.features[None, :3]))
    assert scores.shape == (1, 3) and torch.isfinite(scores).all()
    (stats / "doc_features.tsv").write_text("docid\tpagerank\nd1\t0.1\n")
    with pytest.raises(DataFormatError, match=r"qrels.txt:2: document 'd2' has no line in doc_features.tsv"):
        read_bm25f(stats)


def test_config_refuses_model_fields_in_another_order_than_the_statistics(corpus):
    stats = _stats(corpus)
    good = {"data": {"train": str(stats)}, "model": {"kind": "bm25f", "fields": ["title", "body"]}}
    assert config_from_dict(good).model.fields == ["title", "body"]
    swapped = {**good, "model": {"kind": "bm25f", "fields": ["body", "title"]}}
    with pytest.raises(ConfigError, match=r"model.fields \['body', 'title'\], but the statistics of data"):
        config_from_dict(swapped)
