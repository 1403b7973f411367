"""The "memory" storage level: same contract as the file store, nothing survives a restart."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from broker_core.protocol import M_ID, TX_COMMITTED, TX_PREPARED, TX_ROLLED_BACK
from broker_core.storage.store import DeadLetter, DeadLetterIndex, StoredMessage, TxEntry

MAX_RESOLVED_TX = 100_000  # resolved transaction entries remembered (for state queries and idempotence)


class MemoryStore:
    durable = False
    last_batch = None  # this level encodes no record (TopicStore.last_batch)

    def __init__(self, notify: Callable[..., object], max_dead_letters: int = 100_000, first_seq: int = 1):
        self.notify = notify
        self.next_seq = first_seq
        self.max_dead_letters = max_dead_letters
        self.dead_index = DeadLetterIndex()
        self._dead_order: dict[str, deque[int]] = {}
        self.held = 0  # messages some group still owes
        self.tx: dict[str, TxEntry] = {}
        self.prepared: dict[str, TxEntry] = {}
        self._resolved: deque[str] = deque()

    @property
    def busy(self) -> bool:
        return False

    @property
    def idle(self) -> bool:
        return True

    def recover(self):
        return []

    def append(self, app_id, received_ms, arrays, groups, on_done):
        seq = self.next_seq
        messages = [StoredMessage(seq + i, fields, app_id, received_ms, groups[i]) for i, fields in enumerate(arrays)]
        self.next_seq = seq + len(arrays)
        self.held += sum(1 for m in messages if m.pending)
        # answer on the next loop turn, like the file store, so callers see one behaviour
        self.notify(on_done, None)
        return messages

    def finish(self, message: StoredMessage, group: str) -> None:
        if message.pending <= 1:
            self.held -= 1

    def finish_many(self, messages, group: str) -> None:
        self.held -= sum(1 for m in messages if m.pending <= 1)

    def dead_letter(self, message: StoredMessage, group: str, cause: str, attempts: int, now_ms: int,
                    finish: bool = True) -> None:
        self._keep(DeadLetter(message.seq, group, cause, attempts, now_ms, message.app_id, message.received_ms,
                              message.fields))
        if finish:
            self.finish(message, group)

    def _keep(self, dead: DeadLetter) -> None:
        order = self._dead_order.setdefault(dead.group, deque())
        if len(order) >= self.max_dead_letters:  # memory is the limit at this level: the oldest go
            self.dead_index.live.get(dead.group, {}).pop(order.popleft(), None)
        self.dead_index.add(dead)
        order.append(dead.seq)

    def dead_letters(self, group: str, limit: int) -> list[DeadLetter]:
        return list(self.dead_index.live.get(group, {}).values())[:limit]

    def dead_letter_count(self, group: str) -> int:
        return self.dead_index.count(group)

    def dead_letter_bodies(self, group: str, dead: list[DeadLetter]) -> list[DeadLetter]:
        return dead  # kept whole

    def drop_dead_letters(self, group: str) -> None:
        self.dead_index.drop(group)
        self._dead_order.pop(group, None)

    def import_dead_letters(self, group: str, dead: list[DeadLetter], on_done) -> None:
        for d in dead:
            d.seq, d.group = self.next_seq, group
            self.next_seq += 1
            self._keep(d)
        self.notify(on_done, None)

    def delete_dead_letters(self, group: str, dead: list[DeadLetter], on_done) -> None:
        for d in dead:
            self.dead_index.mark_deleted(group, d.seq, d.fields[M_ID])
        self.notify(on_done, None)

    def sync_finishes(self, on_done) -> None:
        self.notify(on_done, None)  # nothing here outlives the process: finishes are as final as they get

    def redrive(self, group: str, dead: list[DeadLetter], received_ms: int, on_done,
                superseded: list[DeadLetter] = ()) -> list[StoredMessage]:
        for d in superseded:
            self.dead_index.mark_redriven(group, d.seq, d.fields[M_ID])
        seq = self.next_seq
        messages = []
        for i, d in enumerate(dead):
            messages.append(StoredMessage(seq + i, d.fields, d.app_id, received_ms, (group,)))
            self.dead_index.mark_redriven(group, d.seq, d.fields[M_ID])
        self.next_seq = seq + len(dead)
        self.held += len(messages)
        self.notify(on_done, None)
        return messages

    # -- transaction messages ---------------------------------------------------------------

    def prepare(self, app_id, received_ms, arrays, conn_no, on_done):
        seq = self.next_seq
        messages = [StoredMessage(seq + i, fields, app_id, received_ms, ()) for i, fields in enumerate(arrays)]
        self.next_seq = seq + len(arrays)
        for m in messages:
            self.tx[m.id] = self.prepared[m.id] = TxEntry(m, TX_PREPARED, conn_no)
        self.notify(on_done, None)
        return messages

    def end_tx(self, entry: TxEntry, commit: bool, groups, now_ms: int, reason: str, on_done) -> None:
        m = entry.message
        self.prepared.pop(m.id, None)
        entry.state = TX_COMMITTED if commit else TX_ROLLED_BACK
        entry.resolved_ms = now_ms
        entry.reason = reason
        if commit:
            m.groups = groups
            m.pending = len(groups)
            if groups:
                self.held += 1
        self._resolved.append(m.id)
        while len(self._resolved) > MAX_RESOLVED_TX:
            self.tx.pop(self._resolved.popleft(), None)
        self.notify(on_done, None)

    def tick(self, now: float) -> None:
        return None

    def stats(self) -> dict:
        return {"storage": "memory", "next_seq": self.next_seq, "held": self.held, "prepared": len(self.prepared)}

    def close(self) -> None:
        return None

    def discard(self) -> None:
        return None
