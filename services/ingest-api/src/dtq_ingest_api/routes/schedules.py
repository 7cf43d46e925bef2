"""Schedule routes: list, read, next ticks, create or replace, delete, pause, resume (changes
are audited)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, delete, get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody, PathParameter, QueryParameter

from dtq_core.errors import (
    ScheduleNotFoundError,
    UnknownQueueError,
    UnknownTaskError,
    ValidationError,
)
from dtq_core.ops import audit
from dtq_core.ops.audit import Fields
from dtq_core.ops.schedules import (
    AuditFor,
    ScheduleInfo,
    ScheduleNext,
    ScheduleSpec,
    audit_detail,
)
from dtq_core.protocol.submit import check_name
from dtq_ingest_api.auth import ADMIN, READ, actor
from dtq_ingest_api.problems import ApiError, responses
from dtq_ingest_api.schemas import (
    NAME_RE,
    Deleted,
    FieldError,
    ScheduleList,
    ScheduleRequest,
)
from dtq_ingest_api.state import Svc

ScheduleName = Annotated[
    str, PathParameter(min_length=1, max_length=64, pattern=NAME_RE, description="A schedule name.")
]

NEXT_MAX = 100
"""Most ticks ``GET /schedules/{name}/next`` lists."""


def _missing(name: str) -> ScheduleNotFoundError:
    return ScheduleNotFoundError(f"schedule {name!r} not found", name=name)


async def _audit_for(svc: Svc, request: Request[Any, Any, Any], action: str) -> AuditFor:
    """The audit entry of a schedule change, made from the schedule the store changed and
    written with it (the store calls it: in its transaction, or right after it on a cluster);
    the same fields make the log line."""
    stamp = await svc.admin.stamp()
    who = actor(request)

    def entry(spec: ScheduleSpec) -> Fields:
        return stamp.entry(action, queue=spec.queue, actor=who, count=1, detail=audit_detail(spec))

    return entry


async def _route(svc: Svc, data: ScheduleRequest) -> str:
    """The schedule's queue, refused like a submit of its task would be: a schedule whose
    ticks would all be refused is not accepted without ``allow_unknown_task``."""
    try:
        return await svc.client.route_for(
            data.task, data.queue, enforce=not data.allow_unknown_task
        )
    except (UnknownTaskError, UnknownQueueError) as exc:
        detail = {k: v for k, v in exc.detail.items() if k != "field"}
        raise type(exc)(
            f"{exc.message}; every tick would be refused (store it anyway with "
            '"allow_unknown_task": true)',
            field=exc.field,
            **detail,
        ) from None


@get(
    "/schedules",
    guards=[READ],
    operation_id="listSchedules",
    tags=["schedules"],
    summary="Every schedule",
    responses=responses(),
)
async def list_schedules(svc: Svc) -> ScheduleList:
    """Each with ``next_fire_at`` (its next tick, as the scheduler computes it; null while
    paused), ``last_fired_at`` (null unless its latest tick fired a task) and ``last_tick``:
    how its latest tick went (the task it fired, or why it was refused), absent until it
    first ticks."""
    return ScheduleList(items=await svc.schedules.infos())


@get(
    "/schedules/{name:str}",
    guards=[READ],
    operation_id="getSchedule",
    tags=["schedules"],
    summary="A schedule",
    responses=responses(404, 422),
)
async def get_schedule(name: ScheduleName, svc: Svc) -> ScheduleInfo:
    """With ``next_fire_at``, ``last_fired_at`` and ``last_tick``, as in the list."""
    check_name("schedule", name)
    info = await svc.schedules.info(name)
    if info is None:
        raise _missing(name)
    return info


@get(
    "/schedules/{name:str}/next",
    guards=[READ],
    operation_id="getScheduleNext",
    tags=["schedules"],
    summary="A schedule's next ticks",
    responses=responses(404, 422),
)
async def get_schedule_next(
    name: ScheduleName,
    svc: Svc,
    count: Annotated[
        int, QueryParameter(ge=1, le=NEXT_MAX, description="How many ticks, 1 to 100.")
    ] = 5,
) -> ScheduleNext:
    """Its next ``count`` ticks after now (Redis time), computed by the scheduler's own tick
    function, in its time zone: each as UTC (``at``), on the schedule's clock (``local``, with
    its offset) and with the delay its task gets (``delay_s``, its jitter). Listed while it is
    paused too (``paused``): it fires none of them until resumed."""
    check_name("schedule", name)
    try:
        upcoming = await svc.schedules.upcoming(name, count)
    except ValueError as exc:  # a zone this host's tz database lacks; a cron that never fires
        raise ValidationError(str(exc)) from None
    if upcoming is None:
        raise _missing(name)
    return upcoming


@put(
    "/schedules/{name:str}",
    guards=[ADMIN],
    status_code=200,
    operation_id="putSchedule",
    tags=["schedules"],
    summary="Create or replace a schedule",
    responses={
        201: ResponseSpec(ScheduleSpec, description="Created."),
        **responses(413, 415, 422),
    },
)
async def put_schedule(
    name: ScheduleName, data: JSONBody[ScheduleRequest], request: Request[Any, Any, Any], svc: Svc
) -> Response[ScheduleSpec]:
    """201 when the schedule is new, 200 when it replaced one. Exactly one of ``cron`` (read
    in ``timezone``) and ``every_s``; a new schedule first fires at its next tick. Its task
    and queue are checked as a submit's are (422 ``unknown_task``, ``unknown_queue``) unless
    ``allow_unknown_task``; without a queue it gets the task's registered queue."""
    check_name("schedule", name)
    if data.name is not None and data.name != name:
        raise ApiError(
            "validation_error",
            f"the body names schedule {data.name!r} but the path names {name!r}",
            errors=[FieldError(message="differs from the path", field="name", pointer="/name")],
        )
    queue = await _route(svc, data)
    spec = data.to_spec(name, queue)
    audit_for = await _audit_for(svc, request, "schedule.put")
    created = await svc.schedules.put(spec, audit_for=audit_for)
    audit.logged(audit_for(spec))
    return Response(spec, status_code=201 if created else 200)


@delete(
    "/schedules/{name:str}",
    guards=[ADMIN],
    status_code=200,
    operation_id="deleteSchedule",
    tags=["schedules"],
    summary="Delete a schedule",
    responses=responses(404, 422),
)
async def delete_schedule(name: ScheduleName, request: Request[Any, Any, Any], svc: Svc) -> Deleted:
    check_name("schedule", name)
    audit_for = await _audit_for(svc, request, "schedule.delete")
    removed = await svc.schedules.delete(name, audit_for=audit_for)
    if removed is None:
        raise _missing(name)
    audit.logged(audit_for(removed))
    return Deleted(name=name, deleted=True)


@post(
    "/schedules/{name:str}/pause",
    guards=[ADMIN],
    status_code=200,
    operation_id="pauseSchedule",
    tags=["schedules"],
    summary="Pause a schedule",
    responses=responses(404, 422),
)
async def pause_schedule(
    name: ScheduleName, request: Request[Any, Any, Any], svc: Svc
) -> ScheduleSpec:
    """A paused schedule fires nothing; the ticks that pass meanwhile are skipped."""
    check_name("schedule", name)
    audit_for = await _audit_for(svc, request, "schedule.pause")
    spec = await svc.schedules.pause(name, audit_for=audit_for)
    if spec is None:
        raise _missing(name)
    audit.logged(audit_for(spec))
    return spec


@post(
    "/schedules/{name:str}/resume",
    guards=[ADMIN],
    status_code=200,
    operation_id="resumeSchedule",
    tags=["schedules"],
    summary="Resume a schedule",
    responses=responses(404, 422),
)
async def resume_schedule(
    name: ScheduleName, request: Request[Any, Any, Any], svc: Svc
) -> ScheduleSpec:
    """It fires again from its next tick on."""
    check_name("schedule", name)
    audit_for = await _audit_for(svc, request, "schedule.resume")
    spec = await svc.schedules.resume(name, audit_for=audit_for)
    if spec is None:
        raise _missing(name)
    audit.logged(audit_for(spec))
    return spec


HANDLERS = [
    list_schedules,
    get_schedule,
    get_schedule_next,
    put_schedule,
    delete_schedule,
    pause_schedule,
    resume_schedule,
]
