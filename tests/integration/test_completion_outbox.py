"""Acks against real MariaDB: only a batch's recipients can
acknowledge it, refusals are final and counted once, the completion is published after the
commit from stored bytes, and one bad ack fails alone."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest
from support import sql
from test_completion import Metrics, ack_service
from test_flush import RecordingSink

from consolidator.rules.batch import ack_token
from consolidator.rules.completion import Ack, completion_id
from consolidator.services.acks import BAD_TOKEN, AckService
from consolidator.store.completion import SealedBatch
from consolidator.store.mysql import ConnectionParams, MySQLStore

A, B = "a" * 32, "b" * 32


def body(batch_id: str, token: str | None, **members) -> str:
    return Ack(batch_id, token=token, **{k: tuple(v) for k, v in members.items()}).encode().decode()


def test_only_who_holds_the_batch_token_can_acknowledge_it_and_refusals_are_final_and_counted_once(
        store, clock, tmp_path):
    """A sender posing as another tenant knows (or computes) the batch id, not its token."""
    store.seal([SealedBatch(A, "tenant-1", ("A1", "A2"))], clock.now_ms())
    key = store.ack_key()
    metrics = Metrics()
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl", metrics)
    outcome = service.handle_bodies({
        "forged": body(A, "0" * 32, members=[0, 1]),  # a guessed token
        "no-token": body(A, None, members=[0, 1]),  # an ack of the old format
        "other-batch-token": body(A, ack_token(key, B), members=[0, 1]),  # a token of the sender's own batch
        "unknown": body(B, ack_token(key, B), members=[0]),  # a valid token, no such batch (cleaned up)
        "malformed": "{nope",
    })
    assert outcome == dict.fromkeys(("forged", "no-token", "other-batch-token", "unknown", "malformed"))  # none retried
    assert store.acked_members(A) == [] and completions.messages() == []
    assert metrics.values["AcksRefused"] == 5  # each refused ack counted once
    assert "AcksFailed" not in metrics.values

    assert service.handle_bodies({"recipient": body(A, ack_token(key, A), members=[0, 1])}) == {"recipient": None}
    assert [c["batch_id"] for c in completions.messages()] == [A]
    assert BAD_TOKEN == "bad_token"


class _LockProbe(RecordingSink):
    """A completion sink that, while it publishes, checks from another connection that the
    tracker is not locked (a slow sink must not hold the acks' locks)."""

    def __init__(self, path: Path, database_url: str) -> None:
        super().__init__(path)
        self.other = MySQLStore(ConnectionParams.from_url(database_url))
        self.locked: list[str] = []

    def publish(self, batches):
        with self.other.transaction() as cur:
            try:
                cur.execute("SELECT batch_id FROM completion_trackers FOR UPDATE NOWAIT")
            except pymysql.MySQLError as error:  # a tracker row is still locked by the acker
                self.locked.append(str(error))
        if not self.locked:
            stored = {bytes(r["completion_body"]) for r in sql(self.other, "SELECT completion_body FROM"
                                                                           " completion_trackers WHERE outbox = 'PENDING'")}
            assert all(b.body in stored for b in batches), "published bytes differ from the committed ones"
        return super().publish(batches)


def test_the_completion_is_published_after_the_commit_from_the_stored_bytes(store, clock, tmp_path, database_url):
    store.seal([SealedBatch(A, "WH-1", ("A1", "A2"))], clock.now_ms())
    sink = _LockProbe(tmp_path / "completions.jsonl", database_url)
    service = AckService(store, sink, clock, Metrics())
    (result,) = service.ack([Ack(A, members=(0, 1))])
    sink.other.close()
    assert sink.locked == []
    assert result.completed is not None and result.completed.outbox == "PUBLISHED"
    (row,) = sql(store, "SELECT completion_body, outbox FROM completion_trackers")
    assert row["outbox"] == "PUBLISHED" and sink.file.path.read_bytes() == bytes(row["completion_body"]) + b"\n"


class _Killed(BaseException):
    """The acker process is SIGKILLed (nothing after this line of it runs)."""


class _KilledAfterPublish(RecordingSink):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.armed = True

    def publish(self, batches):
        errors = super().publish(batches)
        if self.armed:
            self.armed = False
            raise _Killed
        return errors


def test_an_acker_killed_after_publishing_leaves_the_bytes_every_later_publish_repeats(store, clock, tmp_path):
    """The chaos suite's completion-acks failure: killed between publish and commit, the
    re-delivered ack completed the batch again at a new time, with other bytes."""
    store.seal([SealedBatch(A, "WH-1", ("A1", "A2"))], clock.now_ms())
    store.apply_acks([Ack(A, members=(0,))], clock.now_ms())
    sink = _KilledAfterPublish(tmp_path / "completions.jsonl")
    service = AckService(store, sink, clock, Metrics(), deadline_ms=600_000, lease_ms=60_000)
    with pytest.raises(_Killed):
        service.ack([Ack(A, members=(1,))])
    clock.advance(4_000)  # SQS re-delivers the ack a little later
    (again,) = service.ack([Ack(A, members=(1,))])
    clock.advance(60_000)
    republished = service.sweep().republished  # the process died before marking it
    lines = sink.file.path.read_bytes().splitlines()
    assert len(set(lines)) == 1, "one completion_id published with different bytes"
    assert again.duplicates == 1 and again.completed is None  # the re-delivered ack publishes nothing
    assert republished == 1 and len(lines) == 2  # the stored bytes, once more
    assert sink.messages()[0]["completion_id"] == completion_id(A)


def test_an_ack_that_cannot_be_applied_fails_alone_and_the_others_proceed(store, clock, tmp_path):
    """A tracker without its item-list row (KeyError on main) and an unexpected error on one
    ack: that ack fails (retried), every other ack of the call is applied."""
    store.seal([SealedBatch(A, "WH-1", ("A1",)), SealedBatch(B, "WH-2", ("B1",))], clock.now_ms())
    sql(store, f"DELETE FROM completion_items WHERE batch_id = '{A}'")
    metrics = Metrics()
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl", metrics)
    lost, fine = service.ack([Ack(A, item_ids=("A1",)), Ack(B, item_ids=("B1",))])
    assert lost.error and "no_item_list" in lost.error and not lost.ok
    assert fine.ok and fine.completed is not None
    assert [c["batch_id"] for c in completions.messages()] == [B]
    assert metrics.values["AcksFailed"] == 1


def test_an_unexpected_error_on_one_ack_becomes_its_own_failure(store, clock, tmp_path, monkeypatch):
    store.seal([SealedBatch(A, "WH-1", ("A1",)), SealedBatch(B, "WH-2", ("B1",))], clock.now_ms())
    key = store.ack_key()
    real = store.apply_acks

    def apply_acks(acks, now_ms):
        if any(a.batch_id == A for a in acks):
            raise RuntimeError("a bug on the acks of batch A")
        return real(acks, now_ms)

    monkeypatch.setattr(store, "apply_acks", apply_acks)
    service, completions = ack_service(store, clock, tmp_path / "completions.jsonl")
    outcome = service.handle_bodies({"1": body(A, ack_token(key, A), members=[0]),
                                     "2": body(B, ack_token(key, B), members=[0])})
    assert outcome["2"] is None and "RuntimeError: a bug on the acks of batch A" in outcome["1"]
    assert [c["batch_id"] for c in completions.messages()] == [B]


def test_each_database_gets_its_own_random_ack_key_that_no_statement_text_holds(store):
    from consolidator.store import schema

    def key_made_by_migration_9() -> bytes:
        (statements,) = [st for version, _, st in schema._migrations(0, "utf8mb4_bin") if version == 10]
        (insert,) = [s for s in statements if isinstance(s, tuple)]
        return insert[1][0]  # a statement parameter, never part of the SQL text

    key = store.ack_key()
    assert len(key) == 32 and sql(store, "SELECT COUNT(*) AS n FROM completion_keys") == [{"n": 1}]
    assert key_made_by_migration_9() != key_made_by_migration_9()  # random per migration run
    texts = [s if isinstance(s, str) else s[0] for _, _, statements in schema._migrations(0, "utf8mb4_bin")
             for s in statements]
    assert not any(key.hex() in t.lower() for t in texts)
