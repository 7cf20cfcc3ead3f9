"""Replicas started together on one new PostgreSQL database each open it: the schema and the leases
table are created once, the others wait for them (without the lock, concurrent CREATE TABLE IF NOT
EXISTS fails one of them)."""

from __future__ import annotations

import threading
import uuid


def test_replicas_opening_a_new_database_at_once_all_open(postgres_server):
    from clockfabric.controller.storage.postgres import PostgresStorage

    dsn = postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")
    start = threading.Barrier(4)
    opened: list[PostgresStorage] = []
    failed: list[BaseException] = []

    def open_one() -> None:
        start.wait(5)
        try:
            opened.append(PostgresStorage(dsn))
        except Exception as e:  # what a replica would die of
            failed.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failed == [] and len(opened) == 4
    assert opened[0]._fetch("SELECT version FROM schema_version") == [(1,)]  # one row, not one per replica
    for store in opened:
        store.close()


def test_replicas_taking_the_lease_table_at_once_all_start(postgres_server):
    from clockfabric.controller.lease import Lease

    dsn = postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")
    start = threading.Barrier(4)
    made: list[Lease] = []
    failed: list[BaseException] = []

    def make_one() -> None:
        start.wait(5)
        try:
            made.append(Lease(dsn))
        except Exception as e:  # what a replica would die of
            failed.append(e)

    threads = [threading.Thread(target=make_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert failed == [] and len(made) == 4
    assert sum(lease.hold() for lease in made) == 1  # the table works: one holder
    for lease in made:
        lease.close()
