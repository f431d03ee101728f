"""The idempotent producer on its own (``_core.write.producer``), no server: how it numbers its
calls, which of them are in flight, the floor every try carries, and going on as a new
producer when a call is in doubt (the shape of aiokafka's transaction manager tests)."""

from __future__ import annotations

import threading

from redis_msglog._core.write import producer as _producer
from redis_msglog._core.write.producer import Producer, ProducerSlot


def test_a_producer_numbers_its_calls_and_keeps_the_lowest_in_flight() -> None:
    producer = Producer()
    assert len(producer.id) == 12 and int(producer.id, 16) >= 0
    assert producer.begin() == (1, 1)
    assert producer.begin() == (2, 1)  # call 1 still in flight: the floor stays
    assert producer.floor() == 1 and producer.in_flight() == {1, 2}
    producer.settle(1)
    assert producer.floor() == 2 and producer.begin() == (3, 2)
    producer.settle(2)
    producer.settle(3)
    producer.settle(3)  # settling twice is harmless (a plan's end and a cancel, say)
    assert producer.floor() == 0 and producer.in_flight() == frozenset()
    assert producer.begin() == (4, 4)  # numbers are never reused


def test_calls_numbered_from_many_threads_are_distinct() -> None:
    producer = Producer()
    seen: list[int] = []
    lock = threading.Lock()

    def number() -> None:
        for _ in range(500):
            pseq, floor = producer.begin()
            assert 1 <= floor <= pseq
            with lock:
                seen.append(pseq)
            producer.settle(pseq)

    threads = [threading.Thread(target=number) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(1, 2001)) and not producer.in_flight()


def test_a_slot_numbers_with_its_own_producer_or_the_process_s() -> None:
    own = Producer()
    assert ProducerSlot(own).current() is own
    assert ProducerSlot().current() is _producer.current()
    assert ProducerSlot().current() is ProducerSlot().current()  # shared by the process


def test_retiring_goes_on_as_a_new_producer_and_keeps_the_old_one_s_calls() -> None:
    own = Producer()
    slot = ProducerSlot(own)
    pseq, _ = own.begin()  # a call in doubt: it stays in flight for good
    slot.retire(own)
    assert slot.current() is not own and slot.current().id != own.id
    assert own.in_flight() == {pseq}  # its floor is kept for the caller's retry
    assert slot.current().begin() == (1, 1)  # the new producer numbers from 1
    # The process's producer is retired the same way, for every slot without its own.
    shared, other = ProducerSlot(), ProducerSlot()
    retired = shared.current()
    shared.retire(retired)
    assert shared.current() is not retired and other.current() is shared.current()
    # Retiring a producer that is no longer current changes nothing.
    now = shared.current()
    shared.retire(retired)
    assert shared.current() is now
