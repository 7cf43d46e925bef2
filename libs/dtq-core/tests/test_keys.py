"""Key names (``dtq_core.protocol.keys``): the name of every queue key and global key, the
default namespace, and no hash tag on a global key. Hash tags and slots: ``test_slots``."""

from __future__ import annotations

from dtq_core.names import PRIORITIES
from dtq_core.protocol.keys import GROUP, Keys

HEX32 = "0123456789abcdef" * 2


# -- key names --------------------------------------------------------------------------------


def test_queue_key_names() -> None:
    qk = Keys().queue("emails")
    assert qk.prefix == "dtq:{emails}:"
    assert qk.streams == tuple(f"dtq:{{emails}}:p{p}" for p in range(10))
    assert qk.streams_high_first[0] == "dtq:{emails}:p9"
    assert qk.streams_high_first[-1] == "dtq:{emails}:p0"
    assert qk.task(HEX32) == f"dtq:{{emails}}:t:{HEX32}"
    assert qk.task_prefix == "dtq:{emails}:t:"
    assert qk.delayed == "dtq:{emails}:delayed"
    assert qk.dlq == "dtq:{emails}:dlq"
    assert qk.idem("ab" * 32) == "dtq:{emails}:idem:" + "ab" * 32
    assert qk.idem_prefix == "dtq:{emails}:idem:"
    assert qk.events == "dtq:{emails}:events"
    assert qk.meta == "dtq:{emails}:meta"
    assert qk.task_prefix.removesuffix("t:") + "meta" == qk.meta  # lua/claim.lua relies on it
    assert PRIORITIES == 10
    assert GROUP == "workers"


def test_global_key_names() -> None:
    k = Keys("prod")
    assert k.queues == "prod:queues"
    assert k.workers == "prod:workers"
    assert k.worker("w-1") == "prod:worker:w-1"
    assert k.leader == "prod:leader"
    assert k.leader_epoch == "prod:leader:epoch"
    assert k.schedules == "prod:schedules"
    assert k.schedules_state == "prod:schedules:state"
    assert k.events == "prod:events"
    assert k.audit == "prod:audit"
    assert k.cancel_channel == "prod:cancel"
    assert k.queue("q").prefix == "prod:{q}:"


def test_namespace_default_is_dtq() -> None:
    assert Keys().ns == "dtq"


def test_global_keys_carry_no_hash_tag() -> None:
    k = Keys()
    for key in (
        k.queues,
        k.workers,
        k.worker("w"),
        k.leader,
        k.leader_epoch,
        k.schedules,
        k.schedules_state,
        k.events,
        k.audit,
    ):
        assert "{" not in key
        assert "}" not in key
