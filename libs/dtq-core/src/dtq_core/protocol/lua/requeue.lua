#!lua flags=allow-oom
-- requeue: run dead or failed tasks again (DLQ requeue, POST /tasks/{id}/retry).
-- The attempt budget starts over; the error history is kept.
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] dlq   KEYS[12] events
-- ARGV[1] task key prefix   ARGV[2] events maxlen   ARGV[3] task retention ms
-- ARGV[4..] rands
-- Returns: one value per rand: "requeued", or the task's current status when it was not dead
--   or failed ("" when no such task).
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local dlq_key, events_key = KEYS[11], KEYS[12]
local prefix, ev_maxlen, retention_ms = ARGV[1], ARGV[2], ARGV[3]
local FIRST_RAND = 4  -- ARGV[4..]: the rands
local _, now_s, now_ms = now_parts()
local out, ids, names = {}, {}, {}
for i = FIRST_RAND, #ARGV do
  local rand = ARGV[i]
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'pri', 'dlq', 'task', 'grp', 'ct')
  if h[1] == 'dead' or h[1] == 'failed' then
    if h[3] then rcall('XDEL', dlq_key, h[3]) end
    rcall('HDEL', key, 'dlq', 'ft', 'res', 'rtr', 'cxl', 'due')
    rcall('HSET', key, 'att', '0')
    local pri = tonumber(h[2])
    back_to_queue(prefix, h[5], stream_key(pri), nil, rand, key, pri, h[6], stream_key, now_s, now_ms)
    rcall('PEXPIRE', key, retention_ms)
    out[#out + 1] = 'requeued'
    ids[#ids + 1] = rand; names[#names + 1] = h[4]
  else
    out[#out + 1] = h[1] or ''
  end
end
emit(events_key, ev_maxlen, 'task.queued', ids, names, nil, EV_REASON, 'requeued')
return out
