"""DuckDB's cache of table blocks, trimmed after a scan that filled it.

DuckDB keeps every block it read in its buffer pool, up to its memory limit (80% of RAM
by default). Writing a big collection's rows file (row_file.py) reads every row once:
at 1M chunks that left ~400 MB of the chunk table's blocks cached that no search
needs afterwards (hits then come from the file). DuckDB has no setting for its cache
alone (``memory_limit`` bounds everything, and a write or an index build may need more
than a small cache), so the cache is trimmed once instead: the memory limit is lowered
for a moment (DuckDB evicts unpinned blocks, least recently used first, to meet it) and
set back.

Trimming after every few hit reads instead (each search reading its hits through SQL)
kept the cache at its budget but cost ~3 ms a search at 1M chunks: the hits' blocks
were read and decompressed again.

Call it under the engine's lock: every statement of this process runs under it but a
row-cache warm-up's own cursor (which gives up quietly on a failed read).
"""

from __future__ import annotations

from contextlib import suppress

import duckdb

CACHED_SQL = (
    "SELECT coalesce(sum(memory_usage_bytes) FILTER (WHERE tag = 'BASE_TABLE'), 0),"
    " coalesce(sum(memory_usage_bytes), 0), current_setting('memory_limit') FROM duckdb_memory()"
)


def trim_table_blocks(con: duckdb.DuckDBPyConnection, keep: int) -> bool:
    """Evict cached table blocks down to about ``keep`` bytes if they hold more. True if
    a trim ran; a cache DuckDB cannot shrink (pinned blocks) is left as it is."""
    row = con.execute(CACHED_SQL).fetchone()
    if row is None:
        return False
    cached, held, limit = int(row[0]), int(row[1]), str(row[2])
    if cached <= keep:
        return False
    target = max(held - cached + keep, 1 << 20)
    try:
        with suppress(duckdb.Error):  # e.g. "could not free up enough memory"
            con.execute(f"SET memory_limit = '{int(target)}B'")
    finally:
        con.execute(f"SET memory_limit = '{limit}'")  # DuckDB's own text of it
    return True
