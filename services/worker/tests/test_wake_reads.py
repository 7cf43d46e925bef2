"""Which empty queues the wake-up reads watch (pure: no Redis, no loop): many queues to a read,
reads that merge again after queues had work, and rationing past the blocking pool."""

from __future__ import annotations

from collections.abc import Callable

from dtq_worker.wake_reads import WakeReads


def _reads(
    *empty: str,
    max_parked: int | None = None,
    per_read: int = 3,
    slot_of: Callable[[str], int] | None = None,
) -> WakeReads:
    """Reads over the ``empty`` queues, the first of them first in line."""
    reads = WakeReads(max_parked=max_parked, per_read=per_read, slot_of=slot_of)
    for q in reversed(empty):
        reads.mark_empty(q, first=True)
    return reads


def _parked(reads: WakeReads) -> list[list[str]]:
    return [list(read.queues) for read in reads.park()]


def test_one_read_covers_many_queues_up_to_its_bound() -> None:
    reads = _reads(*"abcdefg")
    assert _parked(reads) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]
    assert all(reads.is_watched(q) for q in "abcdefg")
    assert reads.parked == 3
    assert _parked(reads) == []  # every empty queue is watched


def test_on_a_cluster_only_queues_of_one_slot_share_a_read() -> None:
    slots = {"a": 1, "b": 2, "c": 1, "d": 2, "e": 3}
    reads = _reads(*"abcde", slot_of=slots.__getitem__)
    assert _parked(reads) == [["a", "c"], ["b", "d"], ["e"]]


def test_a_queue_that_got_work_leaves_its_read_which_goes_on_with_the_others() -> None:
    reads = _reads(*"abc")
    (read,) = reads.park()
    reads.unmark("b")  # the read delivered b's entry: b is adopted, then claimed
    reads.delivered(read.rid)
    assert reads.queues_of(read.rid) == ["a", "c"]
    assert not reads.is_watched("b")
    reads.mark_empty("b", first=True)  # b's claim found it empty again
    assert _parked(reads) == [["b"]]  # a read of its own: the others' is not sent again


def test_reads_that_found_nothing_merge_and_the_emptied_one_ends() -> None:
    reads = _reads(*"abc")
    (big,) = reads.park()
    reads.unmark("b")
    reads.mark_empty("b", first=True)
    (solo,) = reads.park()
    assert reads.timed_out(solo.rid) is False  # alone, nothing else to take: goes on
    assert reads.timed_out(big.rid) is False  # takes b from the idle solo read
    assert reads.queues_of(big.rid) == ["a", "c", "b"]
    assert reads.queues_of(solo.rid) == []  # left with none: its loop ends it
    reads.ended(solo.rid)
    assert reads.is_watched("b")
    assert reads.parked == 1


def test_a_read_that_delivered_keeps_its_queues() -> None:
    reads = _reads(*"abcd")
    first, second = reads.park()  # [a b c] and [d]
    reads.unmark("a")
    reads.delivered(first.rid)
    reads.timed_out(second.rid)  # d's read is idle and may take b and c ...
    assert reads.queues_of(second.rid) == ["d"]  # ... but first has just been busy
    assert reads.queues_of(first.rid) == ["b", "c"]


def test_full_reads_keep_their_queues() -> None:
    reads = _reads(*"abcdef")
    first, second = reads.park()
    reads.timed_out(second.rid)
    assert reads.timed_out(first.rid) is False
    assert reads.queues_of(first.rid) == ["a", "b", "c"]
    assert reads.queues_of(second.rid) == ["d", "e", "f"]


def test_when_reads_run_out_a_read_with_room_takes_the_waiting_queue() -> None:
    reads = _reads("a", max_parked=2, per_read=2)
    (ra,) = reads.park()
    reads.mark_empty("b", first=True)
    (_,) = reads.park()
    reads.mark_empty("c", first=True)
    assert reads.park() == []  # two reads parked: the bound
    assert not reads.is_watched("c")
    assert reads.timed_out(ra.rid) is False
    assert reads.queues_of(ra.rid) == ["a", "c"]  # c rides along with a


def test_below_the_bound_no_read_is_rationed() -> None:
    reads = _reads(*"abcdef", max_parked=2)
    first, _ = reads.park()
    assert not reads.rationed
    assert reads.timed_out(first.rid) is False
    assert reads.queues_of(first.rid) == ["a", "b", "c"]


def test_past_the_bound_a_read_that_found_nothing_gives_its_place_to_the_longest_waiting() -> None:
    reads = _reads(*"abcd", max_parked=2, per_read=1)
    first, second = reads.park()
    assert [list(first.queues), list(second.queues)] == [["a"], ["b"]]
    assert reads.rationed
    parked = [first, second]
    order = []
    for _ in range(4):
        ending = parked.pop(0)
        assert reads.timed_out(ending.rid) is True
        reads.ended(ending.rid)
        (started,) = reads.park()
        parked.append(started)
        order.append(list(started.queues))
    assert order == [["c"], ["d"], ["a"], ["b"]]  # every queue in turn


def test_past_the_bound_a_queue_that_just_had_work_is_watched_first() -> None:
    reads = _reads(*"abcd", max_parked=2, per_read=1)
    first, _ = reads.park()
    reads.unmark("a")  # its read delivered; the claim took the task
    reads.ended(first.rid)
    reads.mark_empty("a", first=True)  # then the queue had no more
    assert _parked(reads) == [["a"]]


def test_reads_needed_count_per_slot() -> None:
    slots = {"a": 1, "b": 2, "c": 3}
    reads = _reads(*"abc", max_parked=2, per_read=3, slot_of=slots.__getitem__)
    assert reads.rationed  # three slots: three reads needed, two allowed
    reads.unmark("c")
    assert not reads.rationed
    reads = _reads(*"abcdef", max_parked=2, per_read=3)
    assert not reads.rationed
    reads.mark_empty("g", first=False)
    assert reads.rationed


def test_reads_merge_into_the_fuller_one_and_settle() -> None:
    reads = _reads(*"abcdef", per_read=4)
    big, small = reads.park()  # [a b c d] and [e f]
    reads.unmark("b")
    reads.delivered(big.rid)
    reads.mark_empty("b", first=True)
    (solo,) = reads.park()
    for _ in range(3):  # a few blocks that found nothing, in turn
        for read in (big, small, solo):
            if reads.timed_out(read.rid):
                reads.ended(read.rid)
    assert reads.queues_of(big.rid) == ["a", "c", "d", "b"]  # took b back, not e and f
    assert reads.queues_of(small.rid) == ["e", "f"]
    assert reads.parked == 2  # the solo read ended
