"""
One ranking, three evaluation conventions
=========================================

The same scores and labels evaluated under the ``letor4``, ``lightgbm`` and ``trec`` conventions
(:func:`smoothrank.metrics.evaluate`): the conventions differ in the gain, in the value of a query
without a relevant document and in how ties are broken, so the figures differ.
"""

import torch

from smoothrank.metrics import PRESETS, evaluate

scores = torch.tensor([[0.9, 0.5, 0.5, 0.1, 0.0], [0.3, 0.2, 0.1, 0.0, -1.0]])
labels = torch.tensor([[0, 2, 1, 0, 1], [0, 0, 0, 0, 0]])
doc_ids = [[f"q{q}-d{d}" for d in range(5)] for q in range(2)]  # trec breaks ties by document id
for name in PRESETS:
    per_query = evaluate(scores, labels, metrics=["ndcg@3", "map"], convention=name, doc_ids=doc_ids)
    print(f"{name:9s}", {metric: [round(v, 4) for v in values.tolist()] for metric, values in per_query.items()})
