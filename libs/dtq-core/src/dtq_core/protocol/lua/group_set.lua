#!lua flags=allow-oom
-- group_set: pause, resume or weigh one group of a queue (see "Groups" in _lib.lua), then let
-- it refill: a resumed or heavier group's waiting tasks enter their streams at once.
-- A paused group's tasks stay waiting in it (those already in a stream go back to it when a
-- claim meets them); its running tasks finish. A member of the group's stream set whose task
-- is no longer in a stream (it was cancelled, or its record expired, while a worker's wake-up
-- read held its entry) is dropped here too, so an operator's resume repairs the group's turn.
--
-- KEYS[1..10] priority streams p0..p9
-- ARGV[1] task key prefix   ARGV[2] group   ARGV[3] paused: "1", "0", or "" (unchanged)
-- ARGV[4] weight: "1".."100", or "" (unchanged)
-- Returns: {paused (0/1), weight, waiting, in the streams, running}
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local prefix, gid, paused, weight = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local _, now_s, now_ms = now_parts()
local base = group_base(prefix)
local settings = group_settings(base, gid)
if paused ~= '' then settings.paused = paused == '1' end
if weight ~= '' then settings.weight = tonumber(weight) end
if settings.weight == 1 and not settings.paused then
  rcall('HDEL', base .. 'gq:set', gid)
else
  rcall('HSET', base .. 'gq:set', gid, settings.weight .. (settings.paused and 'p' or ''))
end
local g = base .. 'g:' .. gid
for _, rand in ipairs(rcall('SMEMBERS', g .. ':s')) do
  local h = rcall('HMGET', prefix .. rand, 'st', 'eid')
  if h[1] ~= 'queued' or not h[2] then rcall('SREM', g .. ':s', rand) end
end
group_fill(prefix, gid, stream_key, now_s, now_ms)
return {settings.paused and 1 or 0, settings.weight, rcall('ZCARD', g .. ':w'),
  rcall('SCARD', g .. ':s'), rcall('SCARD', g .. ':r')}
