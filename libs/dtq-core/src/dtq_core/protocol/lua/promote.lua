#!lua flags=allow-oom
-- promote: move due delayed and retrying tasks into their priority streams (scheduler leader).
-- Fenced: the queue keeps the highest leadership epoch it has seen, in its own slot, and a
-- call from an older epoch is refused, so a deposed leader cannot act (no script reads the
-- global lock, which would be cross-slot).
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] delayed   KEYS[12] meta   KEYS[13] events
-- ARGV[1] task key prefix   ARGV[2] leader epoch   ARGV[3] max tasks   ARGV[4] events maxlen
-- ARGV[5] task retention ms
-- Returns: {promoted, next_due_ms or -1}, or an error reply "STALE_LEADER <epoch>"
local prefix, epoch, limit, ev_maxlen = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local seen = tonumber(rcall('HGET', KEYS[12], 'epoch') or '0')
if epoch < seen then
  return redis.error_reply('STALE_LEADER ' .. seen)
end
if epoch > seen then rcall('HSET', KEYS[12], 'epoch', epoch) end
local now_us, now_s, now_ms = now_parts()
local due = rcall('ZRANGEBYSCORE', KEYS[11], '-inf', now_ms, 'LIMIT', 0, limit)
local ids, names, expired = {}, {}, {}
for _, rand in ipairs(due) do
  rcall('ZREM', KEYS[11], rand)
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'pri', 'task', 'exp')
  if h[1] == 'scheduled' or h[1] == 'retrying' then
    if h[4] and tonumber(h[4]) < now_us then
      rcall('HSET', key, 'st', 'expired', 'ft', now_s)
      rcall('PEXPIRE', key, ARGV[5])
      expired[#expired + 1] = rand
    else
      requeue_entry(KEYS[tonumber(h[2]) + 1], nil, rand, key, now_s)
      ids[#ids + 1] = rand; names[#names + 1] = h[3]
    end
  elseif not h[1] then
    -- Its record expired before it was due (RELIABILITY F13): report it, do not drop it.
    expired[#expired + 1] = rand
  end
end
emit(KEYS[13], ev_maxlen, 'task.queued', ids, names, nil, {reason = 'promoted'})
emit(KEYS[13], ev_maxlen, 'task.expired', expired)
local nxt = rcall('ZRANGE', KEYS[11], 0, 0, 'WITHSCORES')
local next_ms = -1
if nxt[2] then next_ms = tonumber(nxt[2]) end
return {#ids, next_ms}
