"""The cost of scoring a match three ways on SQLite, over every match of a word in a copy of the
100k template: FTS5's bm25 (main), the registered Python function (`mnemos_relevance`, this
branch) and the same formula written in SQL string functions (one prefix term; the alternative
the brief named). Each statement sums the scores of every match, 30 runs, medians in ms.

    PYTHONPATH=src:. python bench/results/2026-12-05/rowscore9/relevance_cost.py /var/tmp/r9-100k.db
"""

import sqlite3
import statistics
import sys
import time

from mnemos.domain.search import LENGTH_WEIGHT, SATURATION, TYPICAL_WORDS, parse_search
from mnemos.storage.sqlite import RELEVANCE_FUNCTION, _relevance, fts5_query

source = sqlite3.connect(sys.argv[1])
conn = sqlite3.connect(":memory:")
source.backup(conn)
conn.create_function(RELEVANCE_FUNCTION, 2, _relevance, deterministic=True)

MATCHES = "SELECT rowid FROM memories_fts WHERE memories_fts MATCH :e"
LENGTH = "(length(search_text) - length(replace(search_text, ' ', '')) + 1)"
COUNT = "((length(' ' || search_text) - length(replace(' ' || search_text, :n, ''))) / length(:n))"
DAMPING = f"({SATURATION} * ({1 - LENGTH_WEIGHT} + {LENGTH_WEIGHT} * {LENGTH} / {TYPICAL_WORDS}.0))"
WAYS = {
    "bm25": "SELECT sum(s) FROM (SELECT -bm25(memories_fts, 1.0, 0.0) AS s FROM memories_fts "
    "WHERE memories_fts MATCH :e LIMIT -1)",
    "python": f"SELECT sum({RELEVANCE_FUNCTION}(search_text, :e)) FROM memories "
    f"WHERE pk IN ({MATCHES})",
    "sql": f"SELECT sum(1.0 * {COUNT} / ({COUNT} + {DAMPING})) FROM memories WHERE pk IN ({MATCHES})",
    "match only": f"SELECT count(*) FROM memories WHERE pk IN ({MATCHES})",
    "rows read": f"SELECT sum(length(search_text)) FROM memories WHERE pk IN ({MATCHES})",
}
for word in ("harbor", "marigold"):
    params = {"e": fts5_query(parse_search(word, 500)), "n": " " + word}
    count = conn.execute(WAYS["match only"], params).fetchone()[0]
    python, sql = (conn.execute(WAYS[w], params).fetchone()[0] for w in ("python", "sql"))
    assert abs(python - sql) < 1e-6 * count, (python, sql)  # the same formula
    for way, statement in WAYS.items():
        times = []
        for _ in range(32):
            began = time.perf_counter()
            conn.execute(statement, params).fetchone()
            times.append((time.perf_counter() - began) * 1000)
        print(f"{word} ({count} matches) {way}: {statistics.median(times[2:]):.2f} ms")
