"""The claim decision (pure: no Redis, no loop): how many, from which queue, when to park."""

from __future__ import annotations

import pytest

from dtq_worker.claim_plan import BLOCKING_SPARE, PAUSED_RECHECK_S, ClaimPlan, max_parked_reads


def _plan(*queues: str, concurrency: int = 10, batch: int = 5, prefetch: int = 5) -> ClaimPlan:
    return ClaimPlan(
        list(queues) or ["q"],
        concurrency=concurrency,
        batch=batch,
        capacity=concurrency + prefetch,
        per_read=4,
    )


def _turns(plan: ClaimPlan, n: int, now: float = 0.0) -> list[str | None]:
    return [plan.next_queue(now) for _ in range(n)]


def _watched(plan: ClaimPlan) -> list[list[str]]:
    """The queues of each wake-up read parked now."""
    return [list(read.queues) for read in plan.reads.park()]


# -- how many ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("running", "prefetched", "expected"),
    [
        (0, 0, 5),  # nothing held: a full batch
        (10, 0, 5),  # every slot busy, the prefetch empty: claim ahead, a full batch
        (10, 5, 0),  # full: concurrency + prefetch held
        (7, 4, 0),  # room for 4 (< a batch) and the buffer is not empty: wait
        (10, 1, 0),  # room for 4, every slot busy
    ],
)
def test_room_claims_full_batches_while_one_fits(
    running: int, prefetched: int, expected: int
) -> None:
    assert _plan().room(running, prefetched) == expected


def test_room_below_a_batch_claims_only_when_half_the_slots_would_sit_idle() -> None:
    # A prefetch smaller than a batch: capacity 12, batch 5.
    plan = _plan(concurrency=10, batch=5, prefetch=2)
    assert plan.room(8, 0) == 0  # room 4 < a batch, and only 2 of 10 slots idle
    assert plan.room(4, 0) == 5  # room 8: a full batch
    plan = _plan(concurrency=10, batch=8, prefetch=2)
    assert plan.room(5, 0) == 5  # room 7 < 8, idle 5 of 10 (half): claim the idle ones
    assert plan.room(6, 0) == 0  # idle 4 of 10: wait for more room
    assert plan.room(5, 1) == 0  # something waits in the buffer already: it takes the slot


def test_room_with_one_slot_and_no_prefetch() -> None:
    plan = _plan(concurrency=1, batch=1, prefetch=0)
    assert plan.room(0, 0) == 1
    assert plan.room(1, 0) == 0


# -- from which queue -------------------------------------------------------------------------


def test_queues_take_turns() -> None:
    plan = _plan("a", "b", "c")
    assert _turns(plan, 5) == ["a", "b", "c", "a", "b"]


def test_a_queue_found_empty_is_skipped_until_woken() -> None:
    plan = _plan("a", "b", "c")
    plan.claimed("b", asked=5, got=2, paused=False, now=0.0)
    assert _turns(plan, 4) == ["a", "c", "a", "c"]
    plan.woken("b")
    assert set(_turns(plan, 3)) == {"a", "b", "c"}


def test_a_full_claim_keeps_the_queue_in_turn() -> None:
    plan = _plan("a", "b")
    plan.claimed("a", asked=5, got=5, paused=False, now=0.0)
    assert _turns(plan, 2) == ["a", "b"]


def test_every_queue_empty_means_nothing_to_claim() -> None:
    plan = _plan("a", "b")
    for q in ("a", "b"):
        plan.claimed(q, asked=5, got=0, paused=False, now=0.0)
    assert plan.next_queue(0.0) is None
    assert _watched(plan) == [["b", "a"]]  # the queue that had work last first


def test_a_paused_queue_is_rechecked_after_a_second() -> None:
    plan = _plan("a", "b")
    plan.claimed("a", asked=5, got=0, paused=True, now=100.0)
    assert plan.is_paused("a")
    assert _turns(plan, 3, now=100.5) == ["b", "b", "b"]
    assert plan.pause_wait(100.5) == pytest.approx(PAUSED_RECHECK_S - 0.5)
    assert _watched(plan) == []  # paused is not empty: no wake-up read for it
    plan.expire_pauses(100.5)
    assert plan.is_paused("a")
    plan.expire_pauses(100.0 + PAUSED_RECHECK_S)
    assert not plan.is_paused("a")
    assert plan.pause_wait(101.0) is None
    assert "a" in _turns(plan, 2, now=101.0)


def test_a_paused_queue_comes_back_in_turn_when_its_recheck_is_due_even_before_expiry() -> None:
    plan = _plan("a")
    plan.claimed("a", asked=5, got=0, paused=True, now=0.0)
    assert plan.next_queue(0.5) is None
    assert plan.next_queue(PAUSED_RECHECK_S) == "a"


def test_a_paused_claim_does_not_mark_the_queue_empty() -> None:
    plan = _plan("a")
    plan.claimed("a", asked=5, got=0, paused=True, now=0.0)
    plan.expire_pauses(PAUSED_RECHECK_S)
    assert plan.next_queue(PAUSED_RECHECK_S) == "a"


# -- entries delivered outside a claim --------------------------------------------------------


def test_delivered_entries_make_an_empty_or_paused_queue_claimable() -> None:
    plan = _plan("a", "b")
    plan.claimed("a", asked=5, got=0, paused=False, now=0.0)
    plan.claimed("b", asked=5, got=0, paused=True, now=0.0)
    assert plan.next_queue(0.0) is None
    plan.adopt("b", [(5, "1-0", "r1")])
    assert plan.next_queue(0.0) == "b"
    assert plan.known_ids("b") == {"1-0"}
    plan.adopt("a", [(9, "2-0", "r2")])  # a wake-up read: no longer empty either
    assert _watched(plan) == []
    assert plan.take_adopted("a") == [(9, "2-0", "r2")]
    assert plan.next_queue(0.0) == "a"


def test_entries_of_a_failed_claim_go_first_next_time() -> None:
    plan = _plan("a")
    plan.adopt("a", [(5, "1-0", "r1")])
    taken = plan.take_adopted("a")
    plan.adopt("a", [(5, "2-0", "r2")])  # delivered while the claim was in flight
    plan.return_adopted("a", taken)
    assert plan.take_adopted("a") == [(5, "1-0", "r1"), (5, "2-0", "r2")]
    assert plan.take_adopted("a") == []


def test_queues_already_watched_get_no_second_read() -> None:
    plan = _plan("a", "b", "c")
    plan.claimed("b", asked=5, got=0, paused=False, now=0.0)
    assert _watched(plan) == [["b"]]
    for q in ("a", "c"):
        plan.claimed(q, asked=5, got=0, paused=False, now=0.0)
    assert _watched(plan) == [["c", "a"]]  # the queue that had work last first


def test_a_claim_that_met_delivered_entries_leaves_its_queue_claimable() -> None:
    plan = _plan("a")
    adopted = plan.take_adopted("a")
    plan.adopt("a", [(5, "1-0", "r1")])  # delivered by a read while the claim was in flight
    plan.claimed("a", asked=5, got=len(adopted), paused=False, now=0.0)
    assert _watched(plan) == []
    assert plan.next_queue(0.0) == "a"


def test_parked_reads_are_bounded_by_the_blocking_pool() -> None:
    assert max_parked_reads(100) == 100 - BLOCKING_SPARE
    assert max_parked_reads(2) == 1


def test_a_partitioned_queue_spreads_its_turns_over_its_partitions() -> None:
    plan = _plan("a", "b")
    assert plan.add_partition("a", "a~1")
    assert plan.add_partition("a", "a~2")
    assert not plan.add_partition("a", "a~2")
    assert _turns(plan, 6) == ["a", "b", "a~1", "b", "a~2", "b"]
    plan.claimed("a~1", asked=5, got=0, paused=False, now=0.0)  # found empty
    assert _turns(plan, 4) == ["a", "b", "a~2", "b"]
    plan.claimed("b", asked=5, got=0, paused=False, now=0.0)
    assert _turns(plan, 3) == ["a", "a~2", "a"]
    plan.adopt("a~1", [(5, "1-0", "r1")])  # a read delivered to it
    assert _turns(plan, 3) == ["a~1", "a~2", "a"]


def test_an_entry_the_worker_knows_is_never_adopted_twice() -> None:
    """Reading back the worker's own pending entries can meet an entry a wake-up read has
    delivered too: handed to a second claim, the attempt the first started would be reported
    again and run twice."""
    plan = _plan("a")
    assert plan.adopt("a", [(5, "1-0", "r1"), (5, "2-0", "r2")]) == 2
    assert plan.adopt("a", [(5, "1-0", "r1")]) == 0  # adopted already
    carried = plan.take_adopted("a")
    assert plan.adopt("a", [(5, "2-0", "r2")]) == 0  # in the claim in flight
    assert plan.known_ids("a") == {"1-0", "2-0"}
    plan.started(["1-0", "2-0", "3-0"])  # the claim answered; it read 3-0 itself
    assert plan.adopt("a", [(5, "3-0", "r3"), (5, "4-0", "r4")]) == 1  # 3-0 is settled
    assert plan.take_adopted("a") == [(5, "4-0", "r4")]
    plan.return_adopted("a", [(5, "4-0", "r4")])  # that claim failed: 4-0 is still ours
    assert plan.take_adopted("a") == [(5, "4-0", "r4")]
    assert carried == [(5, "1-0", "r1"), (5, "2-0", "r2")]
