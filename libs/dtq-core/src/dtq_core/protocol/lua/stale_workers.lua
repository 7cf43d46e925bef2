#!lua flags=allow-oom
-- stale_workers: remove workers whose last heartbeat is older than the given age.
--
-- KEYS[1] workers sorted set
-- ARGV[1] age ms
-- Returns: the removed worker ids.
local _, _, now_ms = now_parts()
local stale = rcall('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms - tonumber(ARGV[1]))
for _, id in ipairs(stale) do rcall('ZREM', KEYS[1], id) end
return stale
