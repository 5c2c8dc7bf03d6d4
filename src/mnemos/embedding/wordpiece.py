"""BERT's uncased word-piece tokenizer, as all-MiniLM-L6-v2's `tokenizer.json` configures it.

Pure Python, so the local embedder needs no tokenizer library (and nothing that could reach a
model hub). It reproduces the Hugging Face `tokenizers` pipeline step by step (tests compare the
two on arbitrary text): BertNormalizer (drop control characters, whitespace to spaces, spaces
around CJK ideographs, strip accents, lowercase character by character), BertPreTokenizer
(split on whitespace, every punctuation character alone), then greedy longest-match WordPiece
with `##` continuations, `[UNK]` for a word it cannot cover or longer than 100 characters.

One known difference: `tokenizers` classifies characters with older Unicode tables than Python's,
so a few hundred characters assigned in recent Unicode versions (rare marks and punctuation) may
split differently; every such character is `[UNK]` to this vocabulary either way.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterator, Sequence
from functools import lru_cache
from importlib import resources

MAX_WORD_CHARS = 100
CHUNK_CHARS = 2048  # a long text is normalised a chunk at a time, until the tokens are enough
# What `normalize` turns into a space (other whitespace, like \x0b or \x1c, is dropped instead).
_SEPARATOR = re.compile("[\t\n\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),  # as `tokenizers` has it (BERT's original starts at 0x2B820)
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(low <= cp <= high for low, high in _CJK)


def _is_punctuation(char: str) -> bool:
    return char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


def normalize(text: str) -> str:
    """Clean, space out CJK, strip accents, lowercase: BertNormalizer with lowercase=True."""
    out = []
    for char in text:
        cp = ord(char)
        category = unicodedata.category(char)
        if char in "\t\n\r" or category in ("Zs", "Zl", "Zp"):
            out.append(" ")
        elif cp == 0 or cp == 0xFFFD or category in ("Cc", "Cf", "Co", "Cs"):
            continue  # unassigned code points (Cn) stay, as in `tokenizers`
        elif _is_cjk(cp):
            out.append(f" {char} ")
        else:
            out.append(char)
    decomposed = unicodedata.normalize("NFD", "".join(out))
    kept = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
    return "".join(c.lower() for c in kept)  # char by char: no final-sigma rule


def words(normalized: str) -> Iterator[str]:
    """Whitespace-separated words with each punctuation character split off alone."""
    for chunk in normalized.split():
        start = 0
        for i, char in enumerate(chunk):
            if _is_punctuation(char):
                if start < i:
                    yield chunk[start:i]
                yield char
                start = i + 1
        if start < len(chunk):
            yield chunk[start:]


class WordPiece:
    """Text to ids: `[CLS] pieces... [SEP]`, at most `max_tokens` ids in all.

    Thread-safe: it holds only the vocabulary and a cache of word → ids. The cache is shared by
    every tenant of the process, so it keeps only words a vocabulary can split: a longer word is
    `[UNK]` before the cache is asked (one pasted 10,000-character word would otherwise keep its
    10-40 KB for good, 65,536 of them gigabytes: review24 finding 1).
    """

    def __init__(self, vocab: Sequence[str], max_tokens: int) -> None:
        self.ids = {token: i for i, token in enumerate(vocab)}
        self.max_tokens = max_tokens
        self.cls, self.sep, self.pad = self.ids["[CLS]"], self.ids["[SEP]"], self.ids["[PAD]"]
        self.unk = self.ids["[UNK]"]
        self._word = lru_cache(maxsize=65_536)(self._pieces)

    @classmethod
    def bundled(cls, max_tokens: int) -> WordPiece:
        """BERT's uncased vocabulary (`vocab.txt`, Apache-2.0, shipped with Mnemos)."""
        vocab = resources.files("mnemos.embedding").joinpath("vocab.txt").read_text("utf-8")
        return cls(vocab.splitlines(), max_tokens)

    def encode(self, text: str) -> list[int]:
        room = self.max_tokens - 2
        ids: list[int] = []
        for chunk in _chunks(text):
            for word in words(normalize(chunk)):
                ids.extend((self.unk,) if len(word) > MAX_WORD_CHARS else self._word(word))
                if len(ids) >= room:
                    return [self.cls, *ids[:room], self.sep]
        return [self.cls, *ids, self.sep]

    def _pieces(self, word: str) -> tuple[int, ...]:
        pieces = []
        start = 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self.ids.get(piece)
                if found is not None:
                    pieces.append(found)
                    start = end
                    break
            else:
                return (self.unk,)
        return tuple(pieces)


def _chunks(text: str) -> Iterator[str]:
    """`text` in pieces of about `CHUNK_CHARS`, each cut at a separator so no word is split."""
    start = 0
    while start < len(text):
        end = start + CHUNK_CHARS
        if end < len(text):
            found = _SEPARATOR.search(text, end)
            end = found.start() if found else len(text)
        yield text[start:end]
        start = end
