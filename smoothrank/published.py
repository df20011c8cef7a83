"""Published LETOR 4.0 baselines on MQ2008, for comparison with runs of this package.

Source: the official LETOR 4.0 baseline results (Qin & Liu, "Introducing LETOR 4.0 Datasets",
arXiv:1306.2597, 2013), test sets averaged over the 5 folds, scored with the official
``Eval-Score-4.0.pl`` (gain 2^label - 1; discount 1 at ranks 1 and 2 and 1/log2(r) after; NDCG@k
of a query with fewer than k documents counts as 0; a query with no relevant document has NDCG 0;
MAP of such a query is 0) -- ``convention="letor4"`` in :func:`smoothrank.metrics.evaluate`.
"""

from __future__ import annotations

SOURCE = ("LETOR 4.0 official baselines, MQ2008, 5-fold test average, Eval-Score-4.0.pl "
          "(Qin & Liu, arXiv:1306.2597, 2013)")
CONVENTION = "letor4"
COLUMNS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "p@1", "map")

MQ2008_BASELINES: dict[str, dict[str, float]] = {
    "RankSVM-Struct": {"ndcg@1": 0.3627, "ndcg@3": 0.4286, "ndcg@5": 0.4695, "ndcg@10": 0.2279,
                       "p@1": 0.4273, "map": 0.4696},
    "RankBoost": {"ndcg@1": 0.3856, "ndcg@3": 0.4288, "ndcg@5": 0.4666, "ndcg@10": 0.2255,
                  "p@1": 0.4579, "map": 0.4775},
    "AdaRank-NDCG": {"ndcg@1": 0.3826, "ndcg@3": 0.4420, "ndcg@5": 0.4821, "ndcg@10": 0.2307,
                     "p@1": 0.4515, "map": 0.4824},
    "AdaRank-MAP": {"ndcg@1": 0.3754, "ndcg@3": 0.4370, "ndcg@5": 0.4794, "ndcg@10": 0.2288,
                    "p@1": 0.4426, "map": 0.4764},
    "ListNet": {"ndcg@1": 0.3754, "ndcg@3": 0.4324, "ndcg@5": 0.4747, "ndcg@10": 0.2303,
                "p@1": 0.4451, "map": 0.4775},
}
