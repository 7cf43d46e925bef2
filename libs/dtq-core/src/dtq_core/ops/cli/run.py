"""Running ``dtq``: parse, check the settings, connect, run the command and map its failure
to the exit status (see :mod:`dtq_core.ops.cli`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dtq_core.client import Client
from dtq_core.errors import DtqError, LibraryMissingError, RedisUnavailableError
from dtq_core.infra.runtime import startup
from dtq_core.infra.settings import Settings, public_url
from dtq_core.ops.admin import Admin
from dtq_core.ops.cli.output import _fail
from dtq_core.ops.cli.parser import (
    Handler,
    _usage_problem,
    build_parser,
    with_default_task_action,
)


async def _run(ns: argparse.Namespace, settings: Settings) -> int:
    url = public_url(settings.redis.url)
    try:
        client = Client.from_settings(settings, client_name="dtq-cli")
    except ValueError as exc:  # redis-py refuses the URL itself (unknown scheme, bad port)
        _fail(f"DTQ_REDIS_URL={url!r} is invalid: {exc}")
        return 2
    try:
        handler: Handler = ns.handler
        return await handler(ns, Admin(client))
    except AuthenticationError as exc:
        _fail(f"Redis at {url} refused the credentials: {exc}")
    except LibraryMissingError as exc:
        _fail(exc.message)
    except (RedisUnavailableError, RedisConnectionError, RedisTimeoutError) as exc:
        # What redis-py said (refused, timed out, a certificate not trusted) is the fix's clue.
        cause = str(exc).removeprefix("Redis did not answer: ")
        _fail(f"Redis at {url} did not answer: {cause}")
    except DtqError as exc:
        _fail(exc.message)
    except RedisError as exc:
        _fail(f"Redis at {url} refused the command: {exc}")
    finally:
        await client.aclose()
    return 1


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``dtq``."""
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    ns = parser.parse_args(with_default_task_action(parser, args))
    # `dtq --json CMD` is `dtq CMD --json`: the one place the global flag is read.
    ns.json = getattr(ns, "json", False) or ns.global_json
    offline = getattr(ns, "offline", None)
    if offline is not None:  # a command that needs neither settings nor Redis
        raise SystemExit(offline(ns))
    problem = _usage_problem(ns)
    if problem:
        ns.parser.error(problem)
    # Log lines would interleave with the output; admin actions are in the audit stream.
    settings = startup("dtq", log_level="WARNING").settings
    try:
        code = asyncio.run(_run(ns, settings))
    except KeyboardInterrupt:  # Ctrl-C is how a --watch ends: a success
        code = 0 if getattr(ns, "watch", False) else 130
    raise SystemExit(code)
