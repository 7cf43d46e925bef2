#!lua flags=allow-oom
-- group_set: pause, resume or weigh one group of a queue (see "Groups" in _lib.lua), then let
-- it refill: a resumed or heavier group's waiting tasks enter their streams at once.
-- A paused group's tasks stay waiting in it (those already in a stream go back to it when a
-- claim meets them); its running tasks finish.
--
-- KEYS[1..10] priority streams p0..p9
-- ARGV[1] task key prefix   ARGV[2] group   ARGV[3] paused: "1", "0", or "" (unchanged)
-- ARGV[4] weight: "1".."100", "0" (back to the default, 1), or "" (unchanged)
-- Returns: {paused (0/1), weight, waiting, in the streams, running}
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local prefix, gid, paused, weight = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local _, now_s, now_ms = now_parts()
local base = group_base(prefix)
if paused == '1' then
  rcall('SADD', base .. 'gq:paused', gid)
elseif paused == '0' then
  rcall('SREM', base .. 'gq:paused', gid)
end
if weight == '0' or weight == '1' then
  rcall('HDEL', base .. 'gq:weight', gid)
elseif weight ~= '' then
  rcall('HSET', base .. 'gq:weight', gid, weight)
end
group_fill(prefix, gid, stream_key, now_s, now_ms)
local g = base .. 'g:' .. gid
return {rcall('SISMEMBER', base .. 'gq:paused', gid),
  tonumber(rcall('HGET', base .. 'gq:weight', gid) or '1'),
  rcall('ZCARD', g .. ':w'), rcall('SCARD', g .. ':s'), rcall('SCARD', g .. ':r')}
