"""The host data load of the profile (``payload.profile.host_data: tokenize``): the byte-level BPE
round-trips and is the merge-lowest-rank-first BPE, the loader packs BOS-aligned rows of the right
shape, and a profile that tokenizes on the host records it and pays a slow loader in its steps."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from benchctl.payload.events import EventLog
from benchctl.payload.job import Job, ProfileConfig
from benchctl.payload.workloads import host_data, profile
from benchctl.payload.workloads.bpe import PRE_SPLIT, ByteBPE

TEXTS = ["", "hello world", "  several   spaces\n\n\ttabs and\r\nlines  ", "naïve café 東京 😀 Ωmega",
         "a\x00b\x7f", "1234567 89", "it's snake_case__x!?", "lone \udc80 surrogate", "x" * 300]


@pytest.fixture(scope="module")
def tokenizer() -> ByteBPE:
    return host_data.host_tokenizer(seed=0, merges=48)


def test_the_tokenizer_is_learned_deterministically() -> None:
    a, b = host_data.host_tokenizer(seed=5, merges=24), host_data.host_tokenizer(seed=5, merges=24)
    assert a.merges == b.merges and len(a.merges) == 24
    assert host_data.host_tokenizer(seed=6, merges=24).merges != a.merges
    doc = host_data.documents(seed=5, rank=0, count=1, words=(40, 40))[0]
    assert a.encode(doc) == b.encode(doc)


@pytest.mark.parametrize("text", TEXTS)
def test_decode_inverts_encode_and_ids_stay_in_the_vocabulary(tokenizer: ByteBPE, text: str) -> None:
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert all(0 <= i < tokenizer.bos for i in ids)


def test_merges_compress_the_pseudo_text(tokenizer: ByteBPE) -> None:
    doc = host_data.documents(seed=1, rank=0, count=1, words=(200, 200))[0]
    ids = tokenizer.encode(doc)
    assert tokenizer.decode(ids) == doc
    assert len(ids) < 0.8 * len(doc.encode())
    assert max(ids) >= 256  # merged tokens are used


def _reference_bpe(tokenizer: ByteBPE, text: str) -> list[int]:
    """Textbook BPE: in each pre-split piece, merge the lowest-ranked adjacent pair until none is left."""
    rank = {pair: 256 + i for i, pair in enumerate(tokenizer.merges)}
    out: list[int] = []
    for piece in PRE_SPLIT.findall(text):
        ids = list(piece.encode("utf-8", "surrogatepass"))
        while True:
            pairs = [rank[p] for p in itertools.pairwise(ids) if p in rank]
            if not pairs:
                break
            new = min(pairs)
            merged, i = [], 0
            while i < len(ids):
                if i + 1 < len(ids) and rank.get((ids[i], ids[i + 1])) == new:
                    merged.append(new)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            ids = merged
        out += ids
    return out


@pytest.mark.parametrize("text", [*TEXTS, *host_data.documents(seed=2, rank=1, count=2, words=(80, 120))])
def test_encoding_equals_lowest_rank_first_bpe(tokenizer: ByteBPE, text: str) -> None:
    assert tokenizer.encode(text) == _reference_bpe(tokenizer, text)


def test_the_reserved_character_and_bad_ids_or_merges_are_refused(tokenizer: ByteBPE) -> None:
    with pytest.raises(ValueError, match="U\\+D800"):
        tokenizer.encode("a\ud800b")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([tokenizer.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode([-1])
    with pytest.raises(ValueError, match="made before it"):
        ByteBPE([(97, 256)])


def test_rows_start_at_a_document_and_crop_the_one_that_does_not_fit() -> None:
    tok = ByteBPE([])  # bytes only: one id per character of ASCII text
    rows = host_data.PackedRows(tok, ["abc", "defgh", "ij"], length=8)
    batch = rows.batch(3)
    assert batch.shape == (3, 8) and batch.dtype == torch.int64
    bos = tok.bos
    expected = [[bos, *b"abc", bos, *b"def"],  # "defgh" cropped, its rest dropped
                [bos, *b"ij", bos, *b"abc", bos],  # the document opened by the last BOS is cropped to nothing
                [bos, *b"ij", bos, *b"abc", bos]]  # the documents go round again
    assert batch.tolist() == expected


def test_the_loader_yields_shifted_batches_on_cpu_within_the_vocabulary(tokenizer: ByteBPE) -> None:
    docs = host_data.documents(seed=0, rank=0, count=4, words=(30, 60))
    rows = host_data.PackedRows(tokenizer, docs, length=33)
    batches = host_data.TokenizedBatches(rows, batch_size=3, vocab_size=64, device=torch.device("cpu"))
    inputs, targets = batches.next()
    assert inputs.shape == targets.shape == (3, 32) and inputs.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert int(inputs.min()) >= 0 and int(inputs.max()) < 64
    again = host_data.TokenizedBatches(host_data.PackedRows(tokenizer, docs, 33), 3, 64, torch.device("cpu"))
    assert torch.equal(again.next()[0], inputs)
    assert not torch.equal(batches.next()[0], inputs)  # the next batch is the next documents


def test_ranks_tokenize_different_documents() -> None:
    assert host_data.documents(0, 0, count=2, words=(20, 30)) != host_data.documents(0, 1, count=2, words=(20, 30))


def test_synthetic_is_the_one_random_batch_it_always_was() -> None:
    cfg = ProfileConfig(model="nanochat-d2", vocab_size=64, device_batch_size=2, sequence_len=8, total_batch_size=16,
                        warmup_steps=0, steps=1, seed=3)
    source = host_data.batch_source(cfg, rank=1, vocab_size=64, device=torch.device("cpu"))
    expected = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(4))
    first = source.next()
    assert torch.equal(first[0], expected[:, :-1]) and torch.equal(first[1], expected[:, 1:])
    assert source.next()[0] is first[0]


def test_an_unknown_host_data_is_refused() -> None:
    cfg = ProfileConfig(model="nanochat-d2", device_batch_size=1, sequence_len=8, total_batch_size=8,
                        warmup_steps=0, steps=1, host_data="parquet")
    with pytest.raises(ValueError, match="'parquet' is not one of synthetic, tokenize"):
        host_data.batch_source(cfg, 0, 64, torch.device("cpu"))


# -- the profile with host_data: tokenize --------------------------------------------------------------

@pytest.fixture
def small_loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A cheap host tokenizer and document pool; yields the count of batches the loader made."""
    monkeypatch.setattr(host_data, "TOKENIZER_MERGES", 16)
    monkeypatch.setattr(host_data, "DOCUMENTS", 4)
    made: list[int] = []
    real = host_data.PackedRows.batch

    def counted(self: host_data.PackedRows, rows: int) -> torch.Tensor:
        made.append(rows)
        return real(self, rows)

    monkeypatch.setattr(host_data.PackedRows, "batch", counted)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield made
    finally:
        dist.destroy_process_group()


def _tokenizing_job(**overrides: Any) -> Job:
    cfg = ProfileConfig(**{"model": "nanochat-d2", "vocab_size": 64, "device_batch_size": 1, "sequence_len": 16,
                           "total_batch_size": 32, "warmup_steps": 1, "steps": 2, "host_data": "tokenize",
                           **overrides})
    return Job(campaign="t", cell="c", attempt=1, token="t", gpu="cpu", count=1, phases=["profile"], profile=cfg)


def test_a_tokenizing_profile_feeds_every_micro_step_and_records_it(small_loader: list[int], tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        profile.profile_rank(_tokenizing_job(), 0, 1, log)
    # one batch before the first step, then one per micro-step (grad_accum 2 × 3 steps)
    assert small_loader == [1] * (1 + 2 * 3)
    summary = profile.summarize(path)
    assert summary["timed_steps"] == 2 and summary["host_data"] == "tokenize" and summary["grad_accum"] == 2


def test_a_starved_loader_shows_in_the_step_time(small_loader: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    delay = 0.25  # well above a tiny model's step on a busy CPU, so only the loader can explain it
    counted = host_data.PackedRows.batch

    def slow(self: host_data.PackedRows, rows: int) -> torch.Tensor:
        time.sleep(delay)
        return counted(self, rows)

    monkeypatch.setattr(host_data.PackedRows, "batch", slow)
    samples: list[dict[str, Any]] = []

    class Events:
        def emit(self, kind: str, **fields: Any) -> None:
            samples.append(fields)

    profile.profile_rank(_tokenizing_job(), 0, 1, Events())  # type: ignore[arg-type]
    timed = [s for s in samples if not s["warmup"]]
    assert len(timed) == 2 and all(s["host_data"] == "tokenize" for s in timed)
    assert all(s["step_time_s"] >= 2 * delay for s in timed)  # two micro-steps, each waits on the loader
