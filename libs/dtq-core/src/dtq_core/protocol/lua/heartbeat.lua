#!lua flags=allow-oom
-- heartbeat: stamp a worker's liveness in the worker registry with Redis time.
--
-- KEYS[1] workers sorted set (score: last heartbeat in ms)
-- ARGV[1] worker id
-- Returns: the server time in ms.
local _, _, now_ms = now_parts()
rcall('ZADD', KEYS[1], now_ms, ARGV[1])
return now_ms
