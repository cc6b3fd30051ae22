"""Checks of indexed datasets before any rank starts: each bad file named in one line.

An indexed dataset is PREFIX.bin (the tokens), PREFIX.idx (megatron-core's index: dtype,
sequence lengths, offsets) and PREFIX.json (what `launch-prepare` records: the tokenizer, its
vocabulary and end-of-document id). Reads the index with numpy only (no torch): the header layout
is megatron-core's `_IndexWriter` (indexed_dataset.py).
"""

import json
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import numpy as np

from launcher.config import ConfigError

HEADER = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}  # megatron-core's DType codes


SPLITS = ("training", "validation", "test")


def documents_per_split(split: str, documents: int) -> list:
    """How megatron-core's BlendedMegatronDatasetBuilder splits `documents`: the normalised
    weights as book-ends, each rounded (int(round(end * n)) - int(round(begin * n)))."""
    weights = [float(w) for w in split.split(",")]
    ends = [sum(weights[:i + 1]) / sum(weights) for i in range(len(weights))]
    bounds = [0.0, *ends]
    return [int(round(bounds[i + 1] * documents)) - int(round(bounds[i] * documents))
            for i in range(len(weights))]


def check_split(prefix: str, split: str, documents: int) -> None:
    """A split the run reads (training, and validation unless its weight is 0) with no document
    would never fill its sample index: megatron-core loops on it for ever."""
    counts = documents_per_split(split, documents)
    weights = [float(w) for w in split.split(",")]
    for name, count, weight in zip(SPLITS[:2], counts, weights):
        if weight and count == 0:  # a split of weight 0 megatron-core does not build at all
            raise ConfigError(
                f"data.split={split} leaves {prefix} ({documents} document"
                f"{'s' if documents != 1 else ''}) no {name} document; cut its text into more "
                "documents (launch-prepare --split-on blank, or lines:N) or set data.split so "
                "that training and validation each get one")


def data_vocab_size(data) -> int:
    """The vocabulary of data.path's tokenizer(s), from PREFIX.json."""
    prefixes, _ = data.blend()
    return max(tokenizer_of(prefix).vocab_size for prefix in prefixes)


def check_data(data, vocab_size: Optional[int]) -> None:
    """Every prefix of data.path: present, consistent, non-empty, split so that each split the
    run reads has a document, within the model's vocab (null: its tokenizer's, PREFIX.json)."""
    prefixes, _ = data.blend()
    for prefix in prefixes:
        lengths, dtype, documents = read_index(prefix)
        bin_path = Path(f"{prefix}.bin")
        if not bin_path.is_file():
            raise ConfigError(f"data.path: {bin_path} does not exist; run `launch-prepare ... "
                              f"--output {prefix}` or fix data.path")
        expected = int(lengths.sum()) * np.dtype(dtype).itemsize
        if bin_path.stat().st_size != expected:
            raise ConfigError(f"data.path: {bin_path} has {bin_path.stat().st_size} bytes but "
                              f"{prefix}.idx describes {expected}; the pair does not match, "
                              "prepare them again together")
        if expected == 0:
            raise ConfigError(f"data.path: {bin_path} holds no tokens; prepare it from "
                              "non-empty input")
        check_split(prefix, data.split, documents)
        top = int(np.memmap(bin_path, dtype=dtype, mode="r").max())
        if top >= (vocab_size if vocab_size is not None else tokenizer_of(prefix).vocab_size):
            raise ConfigError(f"data.path: {bin_path} holds token id {top} but "
                              f"model.vocab_size={vocab_size}; set model.vocab_size to at least "
                              f"{tokenizer_of(prefix).vocab_size} (its tokenizer's vocabulary)")


def read_index(prefix: str) -> tuple:
    """(sequence lengths, token dtype, documents) from PREFIX.idx; ConfigError naming the file
    if it is missing, truncated or does not agree with itself (megatron-core's _IndexReader:
    a 34-byte header, then int32 lengths, int64 byte offsets and int64 document bounds)."""
    path = Path(f"{prefix}.idx")
    try:
        with open(path, "rb") as f:
            header = f.read(9)
            if header != HEADER:
                raise ConfigError(f"data.path: {path} is not a megatron-core index; prepare "
                                  "the dataset with `launch-prepare`")
            _version, code, count, bounds = struct.unpack("<QBQQ", f.read(25))
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigError(f"data.path: {path} does not exist; run `launch-prepare ... --output "
                          f"{prefix}` or fix data.path") from None
    except (OSError, struct.error) as err:
        raise ConfigError(f"data.path: {path} is unreadable ({err}); prepare it again") from None
    expected = 34 + 12 * count + 8 * bounds
    if code not in DTYPES or size not in (expected, expected + count):  # + modes: multimodal
        raise ConfigError(f"data.path: {path} is truncated or corrupt ({size} bytes, its header "
                          f"describes {expected}); prepare it again")
    if count == 0:
        raise ConfigError(f"data.path: {path} indexes no documents; prepare it from "
                          "non-empty input")
    lengths = np.fromfile(path, dtype=np.int32, count=count, offset=34)
    offsets = np.fromfile(path, dtype=np.int64, count=count, offset=34 + 4 * count)
    documents = np.fromfile(path, dtype=np.int64, count=bounds, offset=34 + 12 * count)
    itemsize = np.dtype(DTYPES[code]).itemsize
    starts = np.concatenate([[0], np.cumsum(lengths[:-1], dtype=np.int64)]) * itemsize
    if (lengths < 0).any() or not np.array_equal(offsets, starts) or len(documents) < 2 \
            or documents[0] != 0 or documents[-1] != count or (np.diff(documents) < 0).any():
        raise ConfigError(f"data.path: {path} is corrupt (its lengths, offsets and document "
                          "bounds do not agree); prepare it again")
    return lengths, DTYPES[code], bounds - 1  # N documents, N + 1 bounds


def tokenizer_of(prefix: str) -> SimpleNamespace:
    """What megatron-core's GPTDataset needs of the tokenizer (eod, pad, vocab size), from the
    PREFIX.json that `launch-prepare` wrote."""
    path = Path(f"{prefix}.json")
    try:
        meta = json.loads(path.read_text())
        identity = {"tokenizer": meta["tokenizer"], "vocab_size": meta["vocab_size"],
                    "eod": meta["eod"]}  # part of megatron-core's index-cache key
        return SimpleNamespace(eod=meta["eod"], pad=meta.get("pad", -1),
                               vocab_size=meta["vocab_size"], name=meta["tokenizer"],
                               unique_identifiers=identity)
    except FileNotFoundError:
        raise ConfigError(f"data.path: {path} does not exist (it names the tokenizer); prepare "
                          "the dataset with `launch-prepare`") from None
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"data.path: {path} is unreadable or corrupt ({err}); prepare the "
                          "dataset again") from None
