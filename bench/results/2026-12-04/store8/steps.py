import sys, time, tempfile, json
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main/.wt/store8")
from bench.run import database
from mnemos.config import Settings
from mnemos.storage import migrate, open_store
from mnemos.embedding.local import LocalEmbedder
from mnemos.domain.recall import EMBED_LEASE
backend = sys.argv[1]
tpl = {"sqlite": "/var/tmp/mnemos-100k.db", "postgresql": "mnemos_tpl_100k"}[backend]
tmp = Path(tempfile.mkdtemp()); url, drop = database(backend, tmp, tpl)
try:
    s = Settings(database_url=url); migrate(s); store = open_store(s)
    emb = LocalEmbedder(threads=1)
    t = {"claim": [], "embed1": [], "save": [], "tok": []}
    for _ in range(40):
        a = time.perf_counter(); c = store.claim_unembedded(8, EMBED_LEASE); b = time.perf_counter()
        vs = []
        for _, text in c:
            x = time.perf_counter(); emb._tokenizer.encode(text); y = time.perf_counter(); t["tok"].append((y-x)*1000)
            x = time.perf_counter(); vs.append(emb.embed([text])); y = time.perf_counter(); t["embed1"].append((y-x)*1000)
        d = time.perf_counter(); store.save_vectors(emb.model, [i for i, _ in c], np.concatenate(vs)); e = time.perf_counter()
        t["claim"].append((b-a)*1000); t["save"].append((e-d)*1000)
    print(backend, {k: (round(float(np.percentile(v, 50)), 2), round(float(np.percentile(v, 95)), 2)) for k, v in t.items()})
    store.close()
finally:
    drop()
