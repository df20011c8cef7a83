"""``smoothrank cache``: list or clear the on-disk dataset store (:mod:`smoothrank.data.store`)."""

from __future__ import annotations

import argparse
import time
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cache", help="list or clear the dataset cache (parsed LETOR files, memory-mapped)",
        description="The dataset cache: where it is ($SMOOTHRANK_CACHE), its size limit "
                    "($SMOOTHRANK_CACHE_SIZE), its entries; or remove them all.")
    parser.add_argument("action", choices=("list", "clear"), help="list the entries, or remove them all")
    parser.set_defaults(func=run)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def run(args: argparse.Namespace) -> int:
    from smoothrank.data import store

    if args.action == "clear":
        count = store.clear()
        print(f"removed {count} entr{'y' if count == 1 else 'ies'} from {store.cache_dir()}")
        return 0
    entries = store.entries()
    total = sum(e.bytes for e in entries)
    print(f"{store.cache_dir()}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {_size(total)} "
          f"(limit {_size(store.cache_limit())}, least recently used evicted first)")
    for e in entries:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)) if e.last_used else "-"
        print(f"  {_size(e.bytes):>10}  {e.n_docs:>9} docs x {e.n_features:<4} used {used}  {e.source}")
    return 0
