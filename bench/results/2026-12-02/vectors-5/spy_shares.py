"""Busy samples of a `py-spy record -f raw --threads` file by thread and by step:
python spy_shares.py FILE."""

import collections
import re
import sys

total, threads, steps, indexer = (
    0,
    collections.Counter(),
    collections.Counter(),
    collections.Counter(),
)
for line in open(sys.argv[1]).read().splitlines():
    stack, _, count = line.rpartition(" ")
    n, frames = int(count), stack.split(";")
    total += n
    thread = re.sub(r"thread \(\d+\): ", "", frames[0])
    threads[thread] += n
    if thread == "mnemos-indexer":
        names = [re.sub(r" \(.*", "", f) for f in frames[4:7]]
        indexer[";".join(names)] += n
        continue
    text = ";".join(frames)
    for needle, step in [
        ("_embed_one", "embed the query"),
        ("agent_by_key", "authenticate"),
        ("nearest_memories", "nearest_memories"),
        ("keep_search", "keep the answer"),
        ("list_memories", "read the page"),
        ("_page (", "read the page"),
        ("search_answer", "answer JSON"),
    ]:
        if needle in text:
            steps[thread + ": " + step] += n
            break
    else:
        steps[thread + ": other"] += n
print("busy samples", total)
for name, n in threads.most_common():
    print(f"thread {name}: {n} ({n / total:.1%})")
for name, n in steps.most_common(14):
    print(f"  {name}: {n} ({n / total:.1%})")
print("indexer thread:")
for name, n in indexer.most_common(6):
    print(f"  {name}: {n}")
