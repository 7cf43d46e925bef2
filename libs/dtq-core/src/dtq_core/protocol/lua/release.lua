#!lua flags=allow-oom
-- release: hand attempts back to the queue at once (SIGTERM drain, or prefetched tasks a
-- stopping worker never started). Peers can take them immediately instead of after the
-- visibility timeout. The lease is bumped so a late finish of the abandoned handler is
-- refused, and the attempt is given back because it did not run to an outcome.
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] events
-- ARGV[1] task key prefix   ARGV[2] events maxlen   ARGV[3] reason
-- ARGV[4..] 4 values per attempt: rand, priority, entry id, lease
-- Returns: the rands handed back (others had already lost their lease).
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local events_key = KEYS[11]
local prefix, ev_maxlen, reason = ARGV[1], ARGV[2], ARGV[3]
local FIRST_ATTEMPT = 4  -- ARGV[4..]: 4 values per attempt
local _, now_s, now_ms = now_parts()
local released, names = {}, {}
for i = FIRST_ATTEMPT, #ARGV, 4 do
  local rand, pri, eid, lease = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'lease', 'eid', 'att', 'task', 'grp', 'ct')
  if h[1] == 'running' and h[2] == lease and h[3] == eid then
    back_to_queue(prefix, h[6], stream_key(pri), eid, rand, key, pri, h[7], stream_key, now_s, now_ms)
    rcall('HSET', key, 'lease', tonumber(lease) + 1, 'att', math.max(0, tonumber(h[4]) - 1))
    released[#released + 1] = rand
    names[#names + 1] = h[5]
  end
end
emit(events_key, ev_maxlen, 'task.requeued', released, names, nil, EV_REASON, reason)
return released
