"""A cell's key, built and read in one place: ``provider:shape:market[:name=value…][:env=k=v,…]``.

Built from a cell's coordinates (a campaign's cells, an imported record's), every part made
safe: only letters, digits and ``_ . = , -`` (anything else, ``:`` included, becomes ``_``), so
the parts never hold the separator. A stored key is read back with ``parse``, which accepts any
text (an imported record may name its cell freely): ``str(CellKey.parse(text)) == text``.

Making parts safe loses what tells some coordinates apart (``Ring Tree`` and ``Ring_Tree``; an env
value holding ``,`` and ``=``). Where two cells of one campaign would get one key, each of them
gets a last part ``id=<8 hex>``, a hash of its exact coordinates (``exact_tag``; the market left
out, so a spot cell and its on-demand twin stay a pair). Every other key is as it always was, so a
store's cells keep matching their campaign's.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SEPARATOR = ":"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=,-]+")


@dataclass(frozen=True)
class CellKey:
    parts: tuple[str, ...]
    """provider, shape (``GPUxN`` or an instance type), market, then ``name=value`` qualifiers."""

    @classmethod
    def build(cls, provider: str, shape: str, market: str, named: Iterable[tuple[str, object]] = (),
              env: Mapping[str, str] | None = None, tag: str | None = None) -> CellKey:
        """The key of these coordinates; ``named`` in the order given, ``env`` last, sorted by name,
        then ``id=<tag>`` when given (``exact_tag``: only for keys that would collide)."""
        parts = [provider, shape, market, *(f"{name}={value}" for name, value in named)]
        if env:
            parts.append("env=" + ",".join(f"{k}={v}" for k, v in sorted(env.items())))
        if tag:
            parts.append(f"id={tag}")
        return cls(tuple(_UNSAFE.sub("_", part) for part in parts))

    @staticmethod
    def exact_tag(provider: str, shape: str, named: Iterable[tuple[str, object]] = (),
                  env: Mapping[str, str] | None = None) -> str:
        """8 hex digits of a hash of these exact coordinates (the market left out)."""
        exact = [provider, shape, [[name, str(value)] for name, value in named], sorted((env or {}).items())]
        return hashlib.sha256(json.dumps(exact).encode()).hexdigest()[:8]

    @classmethod
    def parse(cls, text: str) -> CellKey:
        return cls(tuple(text.split(SEPARATOR)))

    @property
    def market(self) -> str | None:
        return self.parts[2] if len(self.parts) > 2 else None

    def without_market(self) -> str:
        """The key less its market: what a spot cell and its on-demand twin share."""
        return SEPARATOR.join(self.parts[:2] + self.parts[3:])

    def __str__(self) -> str:
        return SEPARATOR.join(self.parts)


def market_slot(configuration: str) -> tuple[str, str] | None:
    """For a configuration (``CellKey.without_market``: ``provider:shape[:rest]``), the text before and
    after where a cell key of it holds its market: (``provider:shape:``, ``:rest`` or ``""``); None for
    a configuration of fewer than two parts."""
    parts = configuration.split(SEPARATOR)
    if len(parts) < 2:
        return None
    return SEPARATOR.join(parts[:2]) + SEPARATOR, "".join(SEPARATOR + part for part in parts[2:])
