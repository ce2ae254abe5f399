"""A PgBouncer in transaction pooling mode in front of the test server, for the tests.

Debian's ``pgbouncer`` refuses to run as root; as root it is started with ``-u postgres``
(the files it reads and writes are made that user's). Each instance listens on a free
port of 127.0.0.1, forwards every database to the server at ``CLAIMFSM_PG_URL``, trusts
the users named in that URL, and is stopped (and its folder removed) by ``stop``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def available() -> str | None:
    """None if PgBouncer can run here, else why not."""
    if shutil.which("pgbouncer") is None:
        return "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no postgres user for pgbouncer to become"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgBouncer:
    process: subprocess.Popen[bytes]
    folder: Path
    port: int

    def url(self, server_url: str) -> str:
        """``server_url`` (any database on the server) as reached through this PgBouncer,
        with the store option a transaction pooler needs (``prepared_statements=off``)."""
        parts = urlsplit(server_url)
        user = parts.username or "postgres"
        query = "&".join(q for q in (parts.query, "prepared_statements=off") if q)
        return urlunsplit(parts._replace(netloc=f"{user}@127.0.0.1:{self.port}", query=query))

    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start(server_url: str, *, pool_size: int = 10) -> PgBouncer:
    """Start one PgBouncer (transaction pooling, ``pool_size`` server connections per
    database and user) in front of ``server_url``'s server."""
    parts = urlsplit(server_url)
    user = parts.username or "postgres"
    folder = Path(tempfile.mkdtemp(prefix="claimfsm-pgbouncer-"))
    port = _free_port()
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={parts.hostname or '127.0.0.1'} port={parts.port or 5432}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\nmax_client_conn = 500\n"
        "server_reset_query =\nignore_startup_parameters = extra_float_digits\n"
        f"logfile = {folder / 'pgbouncer.log'}\npidfile = {folder / 'pgbouncer.pid'}\n"
    )
    command = ["pgbouncer"]
    if os.geteuid() == 0:
        postgres = pwd.getpwnam("postgres")
        for path in [folder, *folder.iterdir()]:
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
        command += ["-u", "postgres"]
    process = subprocess.Popen(
        [*command, str(folder / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    bouncer = PgBouncer(process, folder, port)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = bouncer.log()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer exited at start ({process.returncode}): {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return bouncer
        time.sleep(0.05)
    log = bouncer.log()
    bouncer.stop()
    raise RuntimeError(f"pgbouncer did not listen on port {port} within 15 s: {log}")
