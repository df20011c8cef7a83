"""Default BM25F against BM25F tuned on NDCG, on a synthetic corpus with planted parameters.

    python examples/bm25f_synthetic.py --out /tmp/bm25f_demo --seeds 0 1 2

For each seed: writes a raw-text corpus (``docs.jsonl`` with a short ``title`` and a long ``body``,
``queries_{train,valid,test}.tsv``, ``qrels.txt``) whose relevance labels come from BM25F with planted
parameters (title weight 4, body weight 1, b 0.3 / 0.9, k1 2) plus noise; then runs the commands a
user runs (``smoothrank bm25f build``, ``smoothrank bm25f evaluate`` with the defaults k1 1.2, b 0.75,
w 1, ``smoothrank train``, ``smoothrank bm25f export``, ``smoothrank bm25f evaluate --params``) and
prints test NDCG@10 of the default, tuned and planted parameters, and the tuned parameters.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import statistics
from pathlib import Path

import numpy as np
import torch

from smoothrank.cli import main
from smoothrank.data.bm25f import read_bm25f
from smoothrank.data.bm25f_builder import build_statistics
from smoothrank.models.bm25f import bm25f_scores

PLANTED = {"k1": 2.0, "fields": {"title": {"weight": 4.0, "b": 0.3}, "body": {"weight": 1.0, "b": 0.9}}}
SPLITS = {"train": 150, "valid": 50, "test": 100}
DOCS_PER_QUERY = 20
VOCABULARY = 5000

CONFIG = """\
data: {train: stats/train, valid: stats/valid, test: stats/test}
model: {kind: bm25f, fields: [title, body]}
loss: {name: soft_ndcg, options: {sigma: 0.1, method: normal}}
optimizer: {lr: 0.05}
training: {epochs: 30, batch_size: 16, list_size: 20}
evaluation: {metrics: [ndcg@10], select_by: ndcg@10}
output: {run_dir: run}
"""


def _document(rng: np.random.Generator, zipf: np.ndarray, terms: list[int], intensity: float
              ) -> dict[str, str]:
    lengths = {"title": 1 + rng.poisson(5), "body": max(5, int(100 * np.exp(0.5 * rng.standard_normal())))}
    rates = {"title": 0.25, "body": 0.04}
    text = {}
    for field, length in lengths.items():
        words = list(rng.choice(VOCABULARY, size=length, p=zipf))
        slots = rng.permutation(length)
        used = 0
        for term in terms:
            count = min(rng.poisson(intensity * rates[field] * length), length - used)
            for slot in slots[used:used + count]:
                words[slot] = term
            used += count
        text[field] = " ".join(f"w{w}" for w in words)
    return text


def write_corpus(folder: Path, seed: int) -> None:
    """The raw files: documents, queries per split, qrels from the planted BM25F score plus noise."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, VOCABULARY + 1)
    zipf /= zipf.sum()
    docs, queries, candidates = [], {}, {}
    for split, n_queries in SPLITS.items():
        lines = []
        for q in range(n_queries):
            qid = f"{split}{q}"
            terms = [int(t) for t in rng.choice(np.arange(200, 2000), size=rng.integers(2, 4), replace=False)]
            lines.append(f"{qid}\t" + " ".join(f"w{t}" for t in terms))
            candidates[qid] = []
            for d in range(DOCS_PER_QUERY):
                docid = f"{qid}-d{d}"
                docs.append({"id": docid, **_document(rng, zipf, terms, rng.random() ** 2)})
                candidates[qid].append(docid)
        queries[split] = "\n".join(lines) + "\n"
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    for split, text in queries.items():
        (folder / f"queries_{split}.tsv").write_text(text)
    # Statistics with placeholder labels, to compute the planted score of every candidate
    (folder / "qrels.txt").write_text("".join(f"{q} 0 {d} 0\n" for q, ds in candidates.items() for d in ds))
    build_statistics(folder / "docs.jsonl", {s: folder / f"queries_{s}.tsv" for s in SPLITS},
                     folder / "qrels.txt", folder / "planted_stats")
    qrels = []
    for split in SPLITS:
        data = read_bm25f(folder / "planted_stats" / split)
        for q, qid in enumerate(data.qids):
            score = _planted_score(data, q)
            noisy = score + 0.1 * score.std() * rng.standard_normal(score.shape)
            labels = (noisy[:, None] > np.quantile(noisy, [0.7, 0.9])[None, :]).sum(1)
            qrels += [f"{qid} 0 {d} {int(y)}\n" for d, y in zip(data.doc_ids[q], labels, strict=True)]
    (folder / "qrels.txt").write_text("".join(qrels))


def _planted_score(data, q: int) -> np.ndarray:
    fields = PLANTED["fields"]
    return bm25f_scores(torch.as_tensor(data.tf[q])[None], torch.as_tensor(data.lengths[q])[None],
                        torch.as_tensor(data.avg_lengths), torch.as_tensor(data.idf[q])[None],
                        weights=torch.tensor([fields[f]["weight"] for f in data.fields], dtype=torch.float64),
                        b=torch.tensor([fields[f]["b"] for f in data.fields], dtype=torch.float64),
                        k1=torch.tensor(PLANTED["k1"], dtype=torch.float64))[0].numpy()


def _run(argv: list[str]) -> str:
    print("$ smoothrank " + shlex.join(argv))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    print(out.getvalue(), end="")
    if status != 0:
        raise SystemExit(status)
    return out.getvalue()


def _ndcg(line: str) -> float:
    return float(line.split("ndcg@10=")[1].split()[0])


def one_seed(folder: Path, seed: int) -> dict[str, float]:
    """Corpus, statistics, default and planted NDCG, training, export and tuned NDCG for one seed."""
    folder.mkdir(parents=True, exist_ok=True)
    write_corpus(folder, seed)
    (folder / "config.yaml").write_text(CONFIG)
    (folder / "planted.json").write_text(json.dumps(PLANTED))
    with contextlib.chdir(folder):
        _run(["bm25f", "build", "--documents", "docs.jsonl", "--queries", "train=queries_train.tsv",
              "--queries", "valid=queries_valid.tsv", "--queries", "test=queries_test.tsv", "--qrels",
              "qrels.txt", "--out", "stats"])
        default = _ndcg(_run(["bm25f", "evaluate", "stats/test", "--metrics", "ndcg@10"]))
        planted = _ndcg(_run(["bm25f", "evaluate", "stats/test", "--metrics", "ndcg@10", "--params",
                              "planted.json"]))
        _run(["train", "config.yaml", f"seed={seed}", "--quiet"])
        _run(["bm25f", "export", "run", "--out", "engine"])
        tuned = _ndcg(_run(["bm25f", "evaluate", "stats/test", "--metrics", "ndcg@10", "--params",
                            "engine/bm25f_params.json"]))
    params = json.loads((folder / "engine" / "bm25f_params.json").read_text())
    fields = params["fields"]
    return {"default": default, "tuned": tuned, "planted": planted,
            "w_title/w_body": fields["title"]["weight"] / fields["body"]["weight"],
            "b_title": fields["title"]["b"], "b_body": fields["body"]["b"],
            "w_title/k1": fields["title"]["weight"] / params["k1"]}


def main_cli() -> None:
    """Run the seeds given on the command line and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="working folder (one sub-folder per seed)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    rows = [one_seed(args.out / f"seed{seed}", seed) for seed in args.seeds]
    planted = {"w_title/w_body": 4.0, "b_title": 0.3, "b_body": 0.9, "w_title/k1": 2.0}
    print(f"\ntest NDCG@10 (letor4 convention), {len(rows)} seed(s): corpus and training seed alike")
    seeds = "".join(f"{'seed ' + str(s):>10}" for s in args.seeds)
    print(f"{'':>16}{seeds}{'mean':>10}{'sd':>8}  planted")
    for key in ("default", "tuned", "planted", "w_title/w_body", "b_title", "b_body", "w_title/k1"):
        values = [row[key] for row in rows]
        sd = statistics.stdev(values) if len(values) > 1 else float("nan")
        shown = "".join(f"{v:>10.4f}" for v in values)
        print(f"{key:>16}{shown}{statistics.mean(values):>10.4f}{sd:>8.4f}"
              + (f"  {planted[key]}" if key in planted else ""))


if __name__ == "__main__":
    main_cli()
