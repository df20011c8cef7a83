"""YAML reading for configs and specs: ``yaml.safe_load`` that refuses duplicate mapping keys and
reads ``1e-3`` as a float (YAML 1.2; PyYAML's YAML 1.1 reads it as a string).

PyYAML keeps the last of two equal keys without a word, so a config with ``lr:`` twice (or two
``optimizer:`` sections) would train with whichever came last. No torch import: loading a spec
stays light.
"""

from __future__ import annotations

import io
import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

__all__ = ["safe_dump", "safe_load"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader whose mappings refuse a key given twice (merge keys ``<<`` may be overridden)."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Checked before SafeLoader flattens merges: an explicit key may override a merged one.
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                previous = first_line.get(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if previous is not None:
                raise ConstructorError(None, None, f"duplicate key {key!r} (first given on line {previous})",
                                       key_node.start_mark)
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


# PyYAML follows YAML 1.1: a float needs a dot (`lr: 1e-3` is the *string* "1e-3", which a loss
# option refuses and which fingerprints differently from 0.001), `010` is octal 8 and `1:30` is
# base-60 90 (`training.epochs=1:30` trained 90 epochs). Numbers are read as YAML 1.2's core schema
# reads them: decimal (leading zeros allowed, `_` separators kept from 1.1), 0o octal, 0x hex, and
# floats with or without a dot; base 60 and 1.1's `0` octal and `0b` binary are strings (which a
# number option refuses, naming the key). The resolver lists are copied first, without 1.1's int
# and float resolvers: add_implicit_resolver would append to SafeLoader's own.
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(
    _INT_TAG, re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7][0-7_]*|0x[0-9a-fA-F][0-9a-fA-F_]*)$"),
    list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(loader.construct_scalar(node)).replace("_", "")
    try:
        return int(text, 0) if text.startswith(("0o", "0x")) else int(text, 10)  # "010" is ten
    except ValueError:
        # An explicit `!!int 0b1` (or `1:30`) is read as YAML 1.1 reads it; what no rule reads (or
        # an integer too long to convert) is an error naming the line, not a traceback.
        return _yaml_1_1(loader, node, yaml.SafeLoader.construct_yaml_int)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    text = str(loader.construct_scalar(node)).replace("_", "").lower()
    try:
        return float(text.replace(".inf", "inf").replace(".nan", "nan"))
    except ValueError:
        return _yaml_1_1(loader, node, yaml.SafeLoader.construct_yaml_float)


def _yaml_1_1(loader: yaml.SafeLoader, node: yaml.ScalarNode, construct: Any) -> Any:
    try:
        return construct(loader, node)
    except (ValueError, IndexError):  # IndexError: an empty value (`!!int`, `!!float ""`)
        raise ConstructorError(None, None, f"{node.value!r} is not a number for {node.tag}",
                               node.start_mark) from None


_UniqueKeyLoader.add_constructor(_INT_TAG, _construct_int)
_UniqueKeyLoader.add_constructor(_FLOAT_TAG, _construct_float)


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes every string either YAML version would read as something else: a
    string ``"09"`` or ``"-.5"`` (plain under YAML 1.1's rules) would load back as a number here,
    and ``"1:30"`` (plain under 1.2's) as one in other YAML 1.1 readers."""


_Dumper.yaml_implicit_resolvers = {
    first: [*yaml.SafeDumper.yaml_implicit_resolvers.get(first, []),
            *_UniqueKeyLoader.yaml_implicit_resolvers.get(first, [])]
    for first in set(yaml.SafeDumper.yaml_implicit_resolvers) | set(_UniqueKeyLoader.yaml_implicit_resolvers)}


def safe_dump(data: Any, **options: Any) -> str:
    """``yaml.safe_dump(data)`` whose output :func:`safe_load` (and any YAML 1.1 reader) reads back
    as ``data``."""
    return yaml.dump(data, Dumper=_Dumper, **options)


def safe_load(text: str, *, name: str | None = None) -> Any:
    """``yaml.safe_load(text)`` with duplicate keys refused (a ``yaml.YAMLError`` giving the line);
    ``name`` (e.g. the file path) is shown in the error's position instead of ``<unicode string>``."""
    stream: Any = text
    if name is not None:
        stream = io.StringIO(text)
        stream.name = name
    return yaml.load(stream, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe
