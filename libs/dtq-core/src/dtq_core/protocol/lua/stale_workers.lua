#!lua flags=allow-oom
-- stale_workers: remove workers whose last heartbeat is older than the given age.
--
-- KEYS[1] workers sorted set
-- ARGV[1] age ms
-- Returns: the removed worker ids.
local workers_key = KEYS[1]
local age_ms = tonumber(ARGV[1])
local _, _, now_ms = now_parts()
local stale = rcall('ZRANGEBYSCORE', workers_key, '-inf', now_ms - age_ms)
for _, id in ipairs(stale) do rcall('ZREM', workers_key, id) end
return stale
