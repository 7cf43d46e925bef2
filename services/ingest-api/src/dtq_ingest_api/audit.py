"""Audit entries of admin actions, carrying the request id of the REST call that made them.

:class:`dtq_core.admin.Admin` writes an audit entry (``action``, ``queue``, ``actor``,
``count``, ``ts``, ``detail``) for each queue and DLQ change. Over REST each entry also names
the request (``request_id``, as in the ``X-Request-ID`` header and the logs), so the audit
stream and the API's logs can be joined. Cancels, retries and schedule changes, which dtq-core
does not audit, are written here in the same shape.
"""

from __future__ import annotations

import structlog
from redis.typing import EncodableT, FieldT

from dtq_core.admin import AUDIT_MAXLEN, Admin
from dtq_ingest_api.context import request_id

log = structlog.get_logger()


class AuditedAdmin(Admin):
    """:class:`Admin` whose audit entries carry the current request id."""

    async def _audit(
        self, action: str, queue: str, actor: str, count: int, detail: str | None = None
    ) -> None:
        await audit(self, action, queue=queue, actor=actor, count=count, detail=detail)


async def audit(
    admin: Admin,
    action: str,
    *,
    queue: str,
    actor: str,
    count: int,
    detail: str | None = None,
) -> None:
    """Append one entry to the audit stream (``Keys.audit``) and log it."""
    seconds, micros = await admin.redis.time()
    fields: dict[FieldT, EncodableT] = {
        "action": action,
        "queue": queue,
        "actor": actor,
        "count": str(count),
        "ts": str(int(seconds) * 1_000_000 + int(micros)),
        "request_id": request_id(),
    }
    if detail:
        fields["detail"] = detail
    await admin.redis.xadd(admin.keys.audit, fields, maxlen=AUDIT_MAXLEN, approximate=True)
    log.info("admin_action", action=action, queue=queue, actor=actor, count=count, detail=detail)
