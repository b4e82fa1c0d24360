"""The ledger: Lockstep's durable, append-only event log (one SQLite file).

What can be appended is the catalogue of typed records in ``ledger.records``: one
frozen Struct per kind (``ledger.records.ClaimGranted`` is ``claim.granted``).

Every state change of the coordinator is appended here *before* it takes effect
outside; on restart the registry is rebuilt from the newest snapshot plus the
events after it.  Rules:

* **append-only** - triggers make ``UPDATE``/``DELETE`` on ``events`` fail, so an
  id, once handed out, names the same event forever;
* **one writer** - the coordinator's ``Ledger``; CLIs use ``open_readonly``;
* **one logical batch = one transaction** - ``Ledger.append(records, ...)`` is all
  or nothing, and is the unit of group commit.

Typical use::

    led = Ledger.open(".git/lockstep/ledger.db")
    ids = led.append([ClaimGranted(agent="a1", session="1.1", token=7,
                                   patterns=["src/x.py"])], epoch=3)
    ...
    await trio.to_thread.run_sync(led.checkpoint)   # periodically, any thread

Reading it by hand, with the coordinator running or not (``-readonly`` is safe;
``data`` is compact JSON, ``ts`` unix seconds)::

    sqlite3 -readonly .git/lockstep/ledger.db \\
      "select id, datetime(ts,'unixepoch'), kind, agent, json_extract(data,'$.reason')
         from events order by id desc limit 20"
    sqlite3 -readonly .git/lockstep/ledger.db \\
      "select kind, count(*) from events group by kind order by 2 desc"
    sqlite3 -readonly .git/lockstep/ledger.db \\
      "select * from events where agent = 'a1' and kind like 'claim.%' order by id"
    sqlite3 -readonly .git/lockstep/ledger.db "select * from meta"

Tables: ``events(id, ts, epoch, kind, agent, session, token, data)``,
``snapshots(upto, ts, blob)``, ``meta(key, value)``; schema version in
``PRAGMA user_version`` (see ``ledger._schema``).
"""

from ._errors import (
    InvalidRecord,
    LedgerClosed,
    LedgerError,
    LedgerMissing,
    LedgerVersionError,
)
from ._schema import SCHEMA_VERSION
from ._store import (
    KEEP_SNAPSHOTS,
    Checkpoint,
    Event,
    Ledger,
    LedgerReader,
    LedgerSpace,
    LedgerStatistics,
    open_readonly,
)
from .records import BY_KIND, CATALOGUE, Record

__all__ = [
    "BY_KIND",
    "CATALOGUE",
    "KEEP_SNAPSHOTS",
    "SCHEMA_VERSION",
    "Checkpoint",
    "Event",
    "InvalidRecord",
    "Ledger",
    "LedgerClosed",
    "LedgerError",
    "LedgerMissing",
    "LedgerReader",
    "LedgerSpace",
    "LedgerStatistics",
    "LedgerVersionError",
    "Record",
    "open_readonly",
]
