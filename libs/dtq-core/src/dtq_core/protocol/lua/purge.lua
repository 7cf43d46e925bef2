#!lua flags=allow-oom
-- purge: cancel up to N waiting tasks of a queue (queued, waiting in a group, and delayed);
-- running tasks are left to finish. Undelivered entries are read by a dedicated consumer and acked, so the group's
-- lag (the queue depth) stays exact.
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] delayed   KEYS[12] events
-- ARGV[1] task key prefix   ARGV[2] max tasks   ARGV[3] events maxlen   ARGV[4] retention ms
-- Returns: {entries read, tasks cancelled} in this call (call again until entries read is 0;
--   entries of tasks cancelled earlier are read and dropped without being counted).
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local delayed_key, events_key = KEYS[11], KEYS[12]
local prefix, limit, ev_maxlen, retention_ms = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local _, now_s, now_ms = now_parts()
local steps_ended = false
local ids = {}
local base = group_base(prefix)
local function drop(key, rand, gid)
  local h = rcall('HMGET', key, 'st', 'wf')
  local st = h[1]
  if gid then rcall('SREM', base .. 'g:' .. gid .. ':s', rand) end  -- off its group's turn
  if st == 'queued' or st == 'scheduled' or st == 'retrying' then
    rcall('HSET', key, 'st', 'cancelled', 'ft', now_s)
    rcall('PEXPIRE', key, retention_ms)
    ids[#ids + 1] = rand
    if h[2] then wf_note(base, rand, h[2], now_ms); steps_ended = true end
  end
end
local seen = 0
for pri = 0, 9 do
  if seen >= limit then break end
  local stream = stream_key(pri)
  local reply = redis.pcall('XREADGROUP', 'GROUP', 'workers', '_purge', 'COUNT', limit - seen,
    'STREAMS', stream, '>')
  if type(reply) == 'table' and not reply.err then
    for _, entry in ipairs(reply[1][2]) do
      seen = seen + 1
      drop(prefix .. entry[2][2], entry[2][2], entry[2][4])
      rcall('XACK', stream, 'workers', entry[1])
      rcall('XDEL', stream, entry[1])
    end
  end
end
if seen < limit then
  for _, gid in ipairs(rcall('SMEMBERS', base .. 'gq:all')) do
    if seen >= limit then break end
    local g = base .. 'g:' .. gid
    local popped = rcall('ZPOPMIN', g .. ':w', limit - seen)
    for j = 1, #popped, 2 do
      seen = seen + 1
      rcall('DECR', base .. 'gq:wait')
      drop(prefix .. popped[j], popped[j])
    end
    if rcall('EXISTS', g .. ':w', g .. ':s', g .. ':r') == 0 then rcall('SREM', base .. 'gq:all', gid) end
  end
end
if seen < limit then
  local delayed = rcall('ZRANGE', delayed_key, 0, limit - seen - 1)
  for _, rand in ipairs(delayed) do
    seen = seen + 1
    rcall('ZREM', delayed_key, rand)
    drop(prefix .. rand, rand)
  end
end
emit(events_key, ev_maxlen, 'task.cancelled', ids, nil, nil, EV_REASON, 'purged')
if steps_ended then wf_signal(base) end
return {seen, #ids}
