"""A byte-level BPE tokenizer in pure Python (stdlib only): the host-side work of a real tokenizer.

Text is pre-split by a regex (words with their leading space, digit groups of at most three,
punctuation runs, whitespace), each piece is UTF-8 encoded, and merges join adjacent tokens inside
a piece, never across. Ids: 0–255 the bytes, 256… the merges in the order learned, then ``bos``
(which decodes to nothing). ``decode(encode(text)) == text`` for any string without U+D800 (the
character the encoder reserves; such text raises ValueError).

Encoding applies the merges in order, each to the whole text at once (one ``str.replace`` over the
ids written as characters). That gives the tokens of merging the lowest-ranked pair first, since a
merge only creates pairs that hold the new token, and those rank after it. Its cost grows with the
number of merges: 256 cost about a microsecond per token on one core, of the order of a compiled
tokenizer's cost per token per thread.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Sequence

MAX_MERGES = 4096
PRE_SPLIT = re.compile(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s*\n|\s+(?!\S)|\s+|.", re.DOTALL)
"""Pieces merges stay inside. The last alternative takes any character the others leave, so the
pieces always join back into the text."""
_RESERVED = "\ud800"
"""Marks piece boundaries before UTF-8 encoding: a lone surrogate is never part of valid text's UTF-8."""
_RESERVED_BYTES = _RESERVED.encode("utf-8", "surrogatepass").decode("latin-1")
_BOUNDARY = "\uffff"
"""A piece boundary among the id-characters: above every id, so no merge matches across it."""


def _byte_chars(text: str) -> str:
    """``text`` as one character per UTF-8 byte (``chr(byte)``), pieces separated by ``_BOUNDARY``."""
    if _RESERVED in text:
        raise ValueError("the text holds U+D800, which the tokenizer reserves; remove it")
    joined = _RESERVED.join(PRE_SPLIT.findall(text))
    return joined.encode("utf-8", "surrogatepass").decode("latin-1").replace(_RESERVED_BYTES, _BOUNDARY)


class ByteBPE:
    """Encode text to ids and back with a fixed merge table (``merges[i]`` makes id 256 + i)."""

    def __init__(self, merges: Sequence[tuple[int, int]]) -> None:
        if len(merges) > MAX_MERGES:
            raise ValueError(f"{len(merges)} merges; at most {MAX_MERGES}")
        self._bytes = [bytes([i]) for i in range(256)]
        self._rules: list[tuple[str, str]] = []
        for new, (a, b) in enumerate(merges, start=256):
            if not (0 <= a < new and 0 <= b < new):
                raise ValueError(f"merge {new - 256} joins ({a}, {b}): a merge joins ids made before it")
            self._bytes.append(self._bytes[a] + self._bytes[b])
            self._rules.append((chr(a) + chr(b), chr(new)))
        self.merges = tuple(merges)
        self.bos = len(self._bytes)
        self._bytes.append(b"")
        self.vocab_size = self.bos + 1

    @classmethod
    def learn(cls, sample: str, n_merges: int) -> ByteBPE:
        """Learn up to ``n_merges`` merges from ``sample``: each the most frequent adjacent pair then
        (ties: the lowest ids), stopping early when no pair occurs twice. Deterministic."""
        if not 0 <= n_merges <= MAX_MERGES:
            raise ValueError(f"n_merges must be between 0 and {MAX_MERGES}, not {n_merges}")
        chars = _byte_chars(sample)
        merges: list[tuple[int, int]] = []
        for new in range(256, 256 + n_merges):
            counts = Counter(itertools.pairwise(chars))
            best = max(((n, -ord(a), -ord(b)) for (a, b), n in counts.items() if _BOUNDARY not in (a, b)),
                       default=None)
            if best is None or best[0] < 2:
                break
            a, b = chr(-best[1]), chr(-best[2])
            merges.append((ord(a), ord(b)))
            chars = chars.replace(a + b, chr(new))
        return cls(merges)

    def encode_chars(self, text: str) -> str:
        """``text``'s ids as characters (``chr(id)``): cheap to slice and join, and ``utf-32-le``
        encoding turns them into an int32 buffer."""
        chars = _byte_chars(text)
        for pair, new in self._rules:
            chars = chars.replace(pair, new)
        return chars.replace(_BOUNDARY, "")

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in self.encode_chars(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids`` (``bos`` decodes to nothing); ValueError for an id outside the vocabulary."""
        ids = list(ids)
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            raise ValueError(f"an id is outside the vocabulary (0..{self.vocab_size - 1})")
        data = b"".join(map(self._bytes.__getitem__, ids))
        return data.decode("utf-8", "surrogatepass")
