"""`python -m tests.watched ARGS` runs `mnemos ARGS` with the suite's tenant check on
(`tests/tenant_filter.py`): the live tests start their servers and admin commands this way, so
statements run in processes of their own (each `--workers` process included: a spawned worker
imports this module as its main module) are checked too. What a process finds is appended, one
JSON line per statement, to the file `tenant_filter.LOG_ENV` names when it exits; the suite
reads the file at its end (`tests/conftest.py`). A process killed with SIGKILL reports nothing.
"""

from __future__ import annotations

import atexit
import json
import os

from tests import tenant_filter


def _save() -> None:
    path = os.environ.get(tenant_filter.LOG_ENV)
    if not path or not tenant_filter.FINDINGS.missing:
        return
    with open(path, "a", encoding="utf-8") as log:
        for statement, origins in tenant_filter.FINDINGS.missing.items():
            log.write(json.dumps({"statement": statement, "origins": sorted(origins)}) + "\n")


tenant_filter.install()
atexit.register(_save)

if __name__ == "__main__":
    from mnemos.cli import main

    main()
