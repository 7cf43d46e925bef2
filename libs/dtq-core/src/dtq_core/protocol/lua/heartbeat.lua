#!lua flags=allow-oom
-- heartbeat: stamp a worker's liveness in the worker registry with Redis time.
--
-- KEYS[1] workers sorted set (score: last heartbeat in ms)
-- ARGV[1] worker id
-- Returns: the server time in ms.
local workers_key = KEYS[1]
local worker_id = ARGV[1]
local _, _, now_ms = now_parts()
rcall('ZADD', workers_key, now_ms, worker_id)
return now_ms
