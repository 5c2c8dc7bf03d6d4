"""NDJSON lines that every line reader splits where the producer did: at `\n` only.

JSON allows U+2028, U+2029 and U+0085 raw inside strings, and orjson, SQLite's `json_object` and
PostgreSQL's `to_json` write them raw; but some line readers split on them too (Python's
`str.splitlines`, JavaScript before ES2019, several log shippers), cutting one memory's line in
two. Each producer of NDJSON passes what it writes through `line_safe`.
"""

from __future__ import annotations

# In valid UTF-8 these byte sequences are exactly these characters (a lead byte never follows
# inside another character), and outside a JSON string there is only ASCII: replacing the bytes
# escapes the characters wherever they are, inside a string, a key or a nested object alike.
LINE_BREAKS = (
    (b"\xe2\x80\xa8", b"\\u2028"),  # LINE SEPARATOR
    (b"\xe2\x80\xa9", b"\\u2029"),  # PARAGRAPH SEPARATOR
    (b"\xc2\x85", b"\\u0085"),  # NEXT LINE
)


_BY_LEAD = tuple(
    (lead, tuple(pair for pair in LINE_BREAKS if pair[0][0] == lead))
    for lead in dict.fromkeys(raw[0] for raw, _ in LINE_BREAKS)
)


def line_safe(chunk: bytes) -> bytes:
    """`chunk` (NDJSON lines, UTF-8) with every line break other than `\n` escaped: the same
    JSON values, decoded by any JSON reader. Once per batch, not per line. A break is searched
    for only when its first and last bytes are both in the chunk (`memchr` scans, at memory
    speed): ASCII, accented or Cyrillic text, and typographic quotes alone never pay the search
    of the whole sequence (about 1.2 ms per MB each); text without `\xe2` or `\xc2` costs two
    scans of the chunk."""
    for lead, breaks in _BY_LEAD:
        if lead in chunk:
            for raw, escaped in breaks:
                if raw[-1] in chunk:
                    chunk = chunk.replace(raw, escaped)
    return chunk
