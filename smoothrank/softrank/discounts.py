"""The shallow training discounts of SoftRank (Taylor et al., WSDM 2008, section 4.7, Figure 5),
defined with the rest of the discount vocabulary in :mod:`smoothrank.gains`."""

from smoothrank.gains import ShallowDiscount, shallow_discount

__all__ = ["ShallowDiscount", "shallow_discount"]
