"""The "memory" storage level: same contract as the file store, nothing survives a restart."""

from __future__ import annotations

from collections.abc import Callable

from broker_core.store import DeadLetter, StoredMessage


class MemoryStore:
    durable = False

    def __init__(self, notify: Callable[..., object], max_dead_letters: int = 100_000):
        self.notify = notify
        self.next_seq = 1
        self.max_dead_letters = max_dead_letters
        self._dead: dict[str, list[DeadLetter]] = {}
        self._dead_counts: dict[str, int] = {}
        self.held = 0  # messages some group still owes

    @property
    def busy(self) -> bool:
        return False

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
        dead = self._dead.setdefault(group, [])
        if len(dead) < self.max_dead_letters:  # memory is the limit at this level
            dead.append(DeadLetter(message.seq, group, cause, attempts, now_ms, message.app_id,
                                   message.received_ms, message.fields))
        self._dead_counts[group] = self._dead_counts.get(group, 0) + 1
        if finish:
            self.finish(message, group)

    def dead_letters(self, group: str, limit: int) -> list[DeadLetter]:
        return self._dead.get(group, [])[:limit]

    def dead_letter_count(self, group: str) -> int:
        return self._dead_counts.get(group, 0)

    def tick(self, now: float) -> None:
        return None

    def stats(self) -> dict:
        return {"storage": "memory", "next_seq": self.next_seq, "held": self.held}

    def close(self) -> None:
        return None
