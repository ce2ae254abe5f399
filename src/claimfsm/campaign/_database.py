"""The database's own faults, PostgreSQL: backends terminated mid-transaction, and one
server restart. (SQLite has no server: its workers are killed mid-transaction instead.)"""

from __future__ import annotations

import random
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from claimfsm.campaign._config import CampaignConfig


class DatabaseFaults:
    """Run in a harness thread until ``stop`` is set; counts what it did."""

    def __init__(
        self,
        config: CampaignConfig,
        pattern: str,
        rng: random.Random,
        stop: threading.Event,
        restart_due: Callable[[], bool],
    ) -> None:
        self.config = config
        self.restart_due = restart_due  # the harness says when the run is halfway
        self.pattern = pattern  # application_name of the worker connections (LIKE pattern)
        self.rng = rng
        self.stop = stop
        self.terminated = 0
        self.restarts = 0

    def run(self) -> None:
        """PostgreSQL: terminate worker backends mid-transaction; restart the server once."""
        import psycopg

        assert self.config.postgres_url is not None
        pattern = self.pattern
        restart_pending = bool(self.config.restart_command)
        conn: psycopg.Connection[Any] | None = None
        next_kill = time.monotonic() + self.config.terminate_every
        while not self.stop.wait(0.002):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.config.postgres_url, autocommit=True, connect_timeout=5
                    )
                if restart_pending and self.restart_due():
                    restart_pending = False
                    conn.close()
                    assert self.config.restart_command is not None
                    subprocess.run(self.config.restart_command, check=True, capture_output=True)
                    self.restarts += 1
                    continue
                if time.monotonic() < next_kill:
                    continue
                rows = conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s"
                    " AND xact_start IS NOT NULL AND pid <> pg_backend_pid()",
                    (pattern,),
                ).fetchall()
                if rows:
                    pid = self.rng.choice(rows)[0]
                    if conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone():
                        self.terminated += 1
                    next_kill = time.monotonic() + self.config.terminate_every
            except psycopg.Error:
                conn = None
                time.sleep(0.2)


def drop_schema(database_url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def local_restart_command() -> tuple[str, ...] | None:
    """The command that restarts this machine's PostgreSQL cluster (Debian), if there is one."""
    versions = (
        sorted(Path("/etc/postgresql").glob("*/main")) if Path("/etc/postgresql").is_dir() else []
    )
    if not versions or shutil.which("pg_ctlcluster") is None:
        return None
    version = versions[-1].parent.name
    return ("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart")
