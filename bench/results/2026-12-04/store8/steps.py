"""The embedding worker's steps timed in process on a copy of a 100k template (store8):
a batch's claim, each text's tokenising and embedding, the batch's save; 40 batches of 8.

    PYTHONPATH=src:. python bench/results/2026-12-04/store8/steps.py sqlite|postgresql
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench.run import database

from mnemos.config import Settings
from mnemos.domain.recall import EMBED_LEASE
from mnemos.embedding.local import LocalEmbedder
from mnemos.storage import migrate, open_store

TEMPLATES = {"sqlite": "/var/tmp/mnemos-100k.db", "postgresql": "mnemos_tpl_100k"}


def main(backend: str) -> None:
    url, drop = database(backend, Path(tempfile.mkdtemp()), TEMPLATES[backend])
    try:
        settings = Settings(database_url=url)
        migrate(settings)
        store = open_store(settings)
        embedder = LocalEmbedder(threads=1)
        spent: dict[str, list[float]] = {"claim": [], "tokenise": [], "embed one": [], "save": []}

        def timed(name: str, began: float) -> None:
            spent[name].append((time.perf_counter() - began) * 1000)

        for _ in range(40):
            began = time.perf_counter()
            claimed = store.claim_unembedded(8, EMBED_LEASE)
            timed("claim", began)
            vectors = []
            for _, text in claimed:
                began = time.perf_counter()
                embedder._tokenizer.encode(text)
                timed("tokenise", began)
                began = time.perf_counter()
                vectors.append(embedder.embed([text]))
                timed("embed one", began)
            began = time.perf_counter()
            store.save_vectors(embedder.model, [i for i, _ in claimed], np.concatenate(vectors))
            timed("save", began)
        figures = {
            name: [round(float(np.percentile(ms, p)), 2) for p in (50, 95)]
            for name, ms in spent.items()
        }
        print(backend, "p50 / p95 ms", figures)
        store.close()
    finally:
        drop()


if __name__ == "__main__":
    main(sys.argv[1])
