"""Tokenizers for `launch-prepare`: raw UTF-8 bytes, or a Hugging Face tokenizer.json on disk.

`load_tokenizer(NAME)` gives an object with `name`, `vocab_size`, `eod`, `pad`, `tokenize(text)`
and `detokenize(ids)`. NAME `byte` is the byte tokenizer (ids 0..255 are the bytes, 256 ends a
document, 257 pads); anything else must be a directory holding tokenizer.json, or the file itself,
read offline with the `tokenizers` library (imported only then). Nothing is ever fetched from a hub.
"""

import os
from typing import Iterable, List

BYTE = "byte"
EOD_TOKENS = ("<|endoftext|>", "</s>", "<eos>", "[SEP]")
"""End-of-document tokens, in the order they are looked for in a Hugging Face vocabulary."""
PAD_TOKENS = ("<pad>", "[PAD]")
"""Padding tokens looked for; without one, the end-of-document token pads."""


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded; the message is one line: the name and the fix."""


class ByteTokenizer:
    """UTF-8 bytes as token ids: 0..255 the bytes, 256 end of document, 257 padding."""

    name = BYTE
    eod = 256
    pad = 257
    vocab_size = 258

    def tokenize(self, text: str) -> List[int]:
        """The UTF-8 bytes of `text`."""
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of byte ids; eod and pad are dropped, broken UTF-8 becomes U+FFFD."""
        data = bytearray()
        for token in ids:
            token = int(token)
            if token in (self.eod, self.pad):
                continue
            if not 0 <= token < 256:
                raise TokenizerError(f"token id {token} is not in the byte tokenizer's vocabulary "
                                     f"(0..{self.vocab_size - 1}); detokenize ids it produced")
            data.append(token)
        return data.decode("utf-8", errors="replace")


class HuggingFaceTokenizer:
    """A `tokenizers.Tokenizer` read from a tokenizer.json; special tokens are never added."""

    def __init__(self, name: str, tokenizer) -> None:
        self.name = name
        self._tokenizer = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()
        self.eod = first_token_id(tokenizer, EOD_TOKENS)
        if self.eod is None:
            raise TokenizerError(f"tokenizer {name}: none of {', '.join(EOD_TOKENS)} is in its "
                                 "vocabulary; add an end-of-document token to its tokenizer.json "
                                 "or use --tokenizer byte")
        pad = first_token_id(tokenizer, PAD_TOKENS)
        self.pad = self.eod if pad is None else pad

    def tokenize(self, text: str) -> List[int]:
        """The ids of `text`, without the BOS/EOS a post-processor would add: prepare adds eod."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of `ids`, special tokens included as text."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


def first_token_id(tokenizer, tokens) -> int | None:
    """The id of the first of `tokens` in the vocabulary, or None."""
    for token in tokens:
        token_id = tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    return None


def tokenizer_json_path(name: str) -> str:
    """NAME's tokenizer.json: NAME itself if a file, NAME/tokenizer.json if a directory."""
    path = os.path.join(name, "tokenizer.json") if os.path.isdir(name) else name
    if not os.path.isfile(path):
        raise TokenizerError(f"tokenizer {name}: not `{BYTE}` and no tokenizer.json at {name}; use "
                             f"--tokenizer {BYTE} or a path to a Hugging Face tokenizer directory")
    return path


def load_hugging_face(name: str) -> HuggingFaceTokenizer:
    """The tokenizer.json at NAME, read from disk with the `tokenizers` library."""
    path = tokenizer_json_path(name)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError(f"tokenizer {name}: the `tokenizers` package is not installed; "
                             f"pip install tokenizers, or use --tokenizer {BYTE}") from None
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as err:  # the Rust side raises plain Exception
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise TokenizerError(f"tokenizer {name}: cannot read {path} ({first}); give a "
                             "tokenizer.json saved by the Hugging Face `tokenizers` library"
                             ) from None
    return HuggingFaceTokenizer(name, tokenizer)


def load_tokenizer(name: str):
    """The tokenizer NAME: `byte`, or a Hugging Face tokenizer directory or tokenizer.json."""
    if name == BYTE:
        return ByteTokenizer()
    return load_hugging_face(name)
