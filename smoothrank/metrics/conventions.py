"""Named evaluation conventions: every choice on which NDCG/MAP implementations differ, explicit.

A number without its convention is meaningless (libraries differ on ties, on queries with no
relevant document, on gains, on k beyond the list and on the discount), so every reported figure
should be printed with :meth:`Convention.describe`.

Presets
-------
``letor4``   the official LETOR 4.0 script Eval-Score-4.0.pl (Qin & Liu, arXiv:1306.2597):
             gain 2^y - 1, discount 1 at ranks 1-2 then 1/log2(r), ties in file order, NDCG@k of a
             query with fewer than k documents is 0, a query with no relevant document scores 0,
             P@k divides by k (missing ranks are non-relevant), labels >= 1 relevant, AP of a
             query with no relevant document is 0.
``lightgbm`` LightGBM's ``ndcg@k`` / ``map@k``: gain 2^y - 1 (``label_gain`` 2^i - 1), discount
             1/log2(1 + r), ties by a stable sort (input order), k > n scores the list there, a
             query with no relevant document scores 1; ``map@k`` divides by min(R, k) and also
             gives 1 to a query with no relevant document.
``trec``     trec_eval's ``ndcg_cut.k``, ``P.k``, ``map``, ``recip_rank``: gain = label, discount
             1/log2(1 + r), ideal DCG over the top k of the judged documents, a query with no
             relevant document scores 0, relevance_level 1. trec_eval orders tied scores by docno,
             descending; :func:`smoothrank.metrics.evaluate` and :func:`smoothrank.metrics.evaluate_flat`
             reproduce that when given ``doc_ids``; without ids they keep the input order and warn
             when real scores tie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from smoothrank.errors import SmoothrankError


@dataclass(frozen=True)
class Convention:
    """How to compute the metrics; see the module docstring for the presets.

    Attributes
    ----------
    name : str
    gain, discount : gain and discount specs of :mod:`smoothrank.gains`
    ndcg_empty : {"one", "zero", "skip"}   NDCG of a query with no relevant document
    ties : {"input", "pessimistic", "optimistic"}
    ndcg_short : {"list", "zero"}          NDCG@k of a query with fewer than k documents
    precision_short : {"pad", "list", "zero"}
    threshold : float                      labels >= threshold are relevant (P, AP, RR)
    binary_empty : {"zero", "one", "skip"} P/AP/RR of a query with no relevant document
    map_empty : {"zero", "one", "skip"}    AP of a query with no relevant document
    ap_denominator : {"relevant", "min_k_relevant"}
    docno_ties : bool                      order tied scores by document id, descending
                                           (trec_eval), where document ids are known
    """

    name: str
    gain: Any = "exp2"
    discount: Any = "log2"
    ndcg_empty: str = "one"
    ties: str = "input"
    ndcg_short: str = "list"
    precision_short: str = "pad"
    threshold: float = 1.0
    binary_empty: str = "zero"
    map_empty: str = "zero"
    ap_denominator: str = "relevant"
    docno_ties: bool = False

    def describe(self) -> str:
        """One line stating every choice, to print beside the numbers."""
        gain = self.gain if isinstance(self.gain, str) else type(self.gain).__name__
        discount = self.discount if isinstance(self.discount, str) else type(self.discount).__name__
        gain_text = {"exp2": "2^y-1", "linear": "y"}.get(gain, gain)
        disc_text = {"log2": "1/log2(1+r)", "letor": "1 at r<=2 then 1/log2(r)",
                     "linear": "|S|-r"}.get(discount, discount)
        ties = "docno descending" if self.docno_ties else self.ties
        return (f"convention {self.name}: gain {gain_text}, discount {disc_text}, ties {ties}, "
                f"no-relevant query NDCG {self.ndcg_empty} / AP {self.map_empty}, "
                f"NDCG@k with n<k: {self.ndcg_short}, P@k with n<k: {self.precision_short}, "
                f"relevant: label >= {self.threshold:g}, AP denominator {self.ap_denominator}")


LETOR4 = Convention(name="letor4", gain="exp2", discount="letor", ndcg_empty="zero", ties="input",
                    ndcg_short="zero", precision_short="pad", threshold=1.0, binary_empty="zero",
                    map_empty="zero", ap_denominator="relevant")
LIGHTGBM = Convention(name="lightgbm", gain="exp2", discount="log2", ndcg_empty="one", ties="input",
                      ndcg_short="list", precision_short="pad", threshold=1.0, binary_empty="zero",
                      map_empty="one", ap_denominator="min_k_relevant")
TREC = Convention(name="trec", gain="linear", discount="log2", ndcg_empty="zero", ties="input",
                  ndcg_short="list", precision_short="pad", threshold=1.0, binary_empty="zero",
                  map_empty="zero", ap_denominator="relevant", docno_ties=True)

PRESETS: dict[str, Convention] = {c.name: c for c in (LETOR4, LIGHTGBM, TREC)}


def get_convention(convention: str | Convention, *, argument: str = "convention") -> Convention:
    """Return a :class:`Convention` from a preset name or an instance.

    Examples
    --------
    >>> from smoothrank.metrics import get_convention
    >>> get_convention("letor4").ndcg_empty
    'zero'
    >>> get_convention("trec").gain
    'linear'
    """
    if isinstance(convention, Convention):
        return convention
    if isinstance(convention, str) and convention in PRESETS:
        return PRESETS[convention]
    raise SmoothrankError(f"{argument}: unknown convention {convention!r}; expected one of "
                          f"{sorted(PRESETS)} or a smoothrank.metrics.Convention")
