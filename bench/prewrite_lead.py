"""How soon a fresh store's pre-writer gets ahead of its puts: ``put_batch`` of 32 (or with
``--single``, ``put_message``) into a new store for ``--seconds``, after each put looking at the
commit log's last file; prints how many puts came, and how long, before the pages ahead of
the write position were made ``--ahead`` bytes deep (the puts before that write fresh pages
themselves, by pwrite under the write guard). The DLedger log's single puts write through the
mapping into pages the store service populates rather than pre-writes, so with ``--single``
in DLedger mode the lead is read from ``populated_to``.

    python bench/prewrite_lead.py classic 100
    python bench/prewrite_lead.py dledger 1024 --single
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.mq_put_loop import BATCH, loop_config, loop_parser
from dledger.rocketmq.store.message import Message
from dledger.rocketmq.store.message_store import MessageStore


def main() -> None:
    ap = loop_parser(__doc__)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--ahead", type=int, default=1 << 20, help="bytes ahead that count as ahead")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dledger-prewrite-lead-"))
    try:
        with MessageStore(root, loop_config(args.mode)) as store:
            cl = store.commitlog
            files = cl.store._log.data if args.mode == "dledger" else cl.files
            populated = args.mode == "dledger" and args.single
            body = os.urandom(args.size)
            bodies = [body] * BATCH
            msg = Message("TopicA", body, tags="TagA")
            puts, ahead_after, ahead_at = 0, -1, 0.0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                if args.single:
                    store.put_message(msg)
                else:
                    store.put_batch("TopicA", bodies, tags="TagA")
                puts += 1
                if ahead_after < 0:
                    f = files.files[-1]
                    made = f.populated_to if populated else f.prewritten_to
                    if made - f.wrote_position >= args.ahead:
                        ahead_after, ahead_at = puts, time.perf_counter() - t0
            unit = "puts" if args.single else f"batches of {BATCH}"
            if ahead_after < 0:
                print(f"{puts} {unit}; the pages ahead never reached {args.ahead} bytes")
            else:
                print(f"{puts} {unit}; {args.ahead} bytes ahead after {ahead_after} ({ahead_at * 1e3:.1f} ms)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
