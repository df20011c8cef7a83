"""LETOR / SVMlight I/O, query-list datasets, training and evaluation batches, transforms.

See ``docs/data.md`` for the file formats, the reader's policies and the batch layout.
"""

from smoothrank.data.batching import Batch, evaluation_batches, length_buckets, training_batches
from smoothrank.data.dataset import Dataset, concat_datasets
from smoothrank.data.letor import load_letor, parse_letor
from smoothrank.data.predictions import is_trec_run, read_predictions, read_scores, read_trec_run
from smoothrank.data.tables import load_table
from smoothrank.data.writers import write_letor, write_predictions, write_qrels, write_trec_run

__all__ = [
    "Batch",
    "Dataset",
    "concat_datasets",
    "evaluation_batches",
    "is_trec_run",
    "length_buckets",
    "load_letor",
    "load_table",
    "parse_letor",
    "read_predictions",
    "read_scores",
    "read_trec_run",
    "training_batches",
    "write_letor",
    "write_predictions",
    "write_qrels",
    "write_trec_run",
]
