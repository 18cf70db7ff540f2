"""Where the profile's batches come from (``payload.profile.host_data``).

``synthetic``: one batch of random ids drawn at start and fed every micro-step (no host work).
``tokenize``: as upstream nanochat's loader, every micro-step's batch is tokenized on the host:
documents (pseudo-text drawn from the seed, different on each rank) are encoded by a byte-level
BPE (``payload.workloads.bpe``, its merges learned at start from the same pseudo-language), each prefixed
with BOS and packed into rows of ``sequence_len + 1`` ids that start at a document: a document is
placed whole while it fits, and the one that does not fit is cropped to fill the row (its rest is
dropped, as upstream crops). The ids, modulo the model's vocabulary, go to the device (through
pinned memory on GPU). As upstream, the next batch is made on the rank's own thread right after a
micro-step's backward is launched, so on GPU the tokenizing overlaps the backward and costs step
time only when the CPU cannot keep up. (Not in a background thread: the tokenizer is Python,
which holds the interpreter lock and would delay the launching thread; upstream's does not.)
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ..job import HOST_DATA, ProfileConfig
from .bpe import ByteBPE

if TYPE_CHECKING:
    import torch

TOKENIZER_MERGES = 256
"""Merges of the host tokenizer: about a microsecond per token on one core (``payload.workloads.bpe``)."""
LEXICON_WORDS = 4000
DOCUMENTS = 256
"""Documents in each rank's pool; the loader cycles through them (tokenizing them again each time)."""
WORDS_PER_DOCUMENT = (60, 1200)
_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
           "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "ou", "io", "oa")
_FOREIGN = ("café", "naïve", "über", "façade", "東京", "数据", "Ωmega", "niño")


def lexicon(seed: int, words: int = LEXICON_WORDS) -> list[str]:
    """The pseudo-language's words, most frequent first (the same on every rank)."""
    rng = random.Random(f"lexicon:{seed}")
    syllables = [o + v for o in _ONSETS for v in _VOWELS]
    made = ["".join(rng.choices(syllables, k=rng.choice((1, 1, 2, 2, 2, 3, 3, 4)))) for _ in range(words)]
    made[7::97] = itertools.islice(itertools.cycle(_FOREIGN), len(made[7::97]))
    return made


def pseudo_document(rng: random.Random, words: list[str], count: int) -> str:
    """``count`` words of ``words`` (Zipf-like frequencies) as sentences and paragraphs, with numbers."""
    picked = rng.choices(words, cum_weights=_zipf(len(words)), k=count)
    sentences, start = [], 0
    while start < count:
        end = min(count, start + rng.randint(4, 24))
        sentence = " ".join(picked[start:end])
        if rng.random() < 0.15:
            sentence += f" {rng.randint(0, 99999)}"
        sentences.append(sentence[:1].upper() + sentence[1:] + rng.choice(".....?!,;:"))
        start = end
    return "".join(s + ("\n\n" if rng.random() < 0.1 else " ") for s in sentences).rstrip() + "\n"


_ZIPF: dict[int, list[float]] = {}


def _zipf(n: int) -> list[float]:
    if n not in _ZIPF:
        _ZIPF[n] = list(itertools.accumulate(1.0 / (i + 1) for i in range(n)))
    return _ZIPF[n]


def documents(seed: int, rank: int, count: int = DOCUMENTS, words: tuple[int, int] = WORDS_PER_DOCUMENT,
              ) -> list[str]:
    """Rank ``rank``'s document pool, drawn from ``seed`` alone."""
    rng = random.Random(f"documents:{seed}:{rank}")
    lex = lexicon(seed)
    return [pseudo_document(rng, lex, rng.randint(*words)) for _ in range(count)]


def host_tokenizer(seed: int, merges: int = TOKENIZER_MERGES) -> ByteBPE:
    """The tokenizer every rank builds at start: merges learned from a sample of the pseudo-language."""
    rng = random.Random(f"tokenizer:{seed}")
    return ByteBPE.learn(pseudo_document(rng, lexicon(seed), 2000), merges)


class PackedRows:
    """Rows of ``length`` token ids, each starting at a document's BOS, tokenized as they are needed."""

    def __init__(self, tokenizer: ByteBPE, docs: Sequence[str], length: int) -> None:
        if not docs:
            raise ValueError("no documents to tokenize")
        self.tokenizer, self.length = tokenizer, length
        self._docs = itertools.cycle(docs)
        self._bos = chr(tokenizer.bos)

    def row(self) -> str:
        """The next row, as id-characters (``ByteBPE.encode_chars``)."""
        parts, room = [], self.length
        while room:
            parts.append((self._bos + self.tokenizer.encode_chars(next(self._docs)))[:room])
            room -= len(parts[-1])
        return "".join(parts)

    def batch(self, rows: int) -> torch.Tensor:
        """The next ``rows`` rows as an int64 CPU tensor of shape (rows, length)."""
        import torch

        data = bytearray("".join(self.row() for _ in range(rows)).encode("utf-32-le"))
        return torch.frombuffer(data, dtype=torch.int32).view(rows, self.length).long()


class Batches(Protocol):
    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next micro-step's (inputs, targets) on the device."""
        ...


class FixedBatch:
    """``synthetic``: the same random batch every micro-step, drawn once from ``seed + rank``."""

    def __init__(self, cfg: ProfileConfig, rank: int, vocab_size: int, device: torch.device) -> None:
        import torch

        generator = torch.Generator().manual_seed(cfg.seed + rank)
        batch = torch.randint(0, vocab_size, (cfg.device_batch_size, cfg.sequence_len + 1),
                              generator=generator).to(device)
        self._pair = (batch[:, :-1], batch[:, 1:])

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._pair


class TokenizedBatches:
    """``tokenize``: each call tokenizes the documents for one micro-step's batch on the host."""

    def __init__(self, rows: PackedRows, batch_size: int, vocab_size: int, device: torch.device) -> None:
        self.rows, self.batch_size, self.vocab_size, self.device = rows, batch_size, vocab_size, device

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.rows.batch(self.batch_size) % self.vocab_size
        if self.device.type == "cuda":
            ids = ids.pin_memory().to(self.device, non_blocking=True)
        return ids[:, :-1], ids[:, 1:]


def batch_source(cfg: ProfileConfig, rank: int, vocab_size: int, device: torch.device) -> Batches:
    """The batches ``cfg.host_data`` names; ValueError for a name it does not know."""
    if cfg.host_data == "synthetic":
        return FixedBatch(cfg, rank, vocab_size, device)
    if cfg.host_data == "tokenize":
        rows = PackedRows(host_tokenizer(cfg.seed, TOKENIZER_MERGES), documents(cfg.seed, rank, DOCUMENTS),
                          cfg.sequence_len + 1)
        return TokenizedBatches(rows, cfg.device_batch_size, vocab_size, device)
    raise ValueError(f"host_data {cfg.host_data!r} is not one of {', '.join(HOST_DATA)}")
