#!lua flags=allow-oom
-- cancel: stop a task that has not finished.
--   queued            -> cancelled (its stream entry is skipped and acked by the next claim;
--                        one waiting in its group leaves the group's waiting set)
--   scheduled/retrying -> cancelled (removed from the delayed set)
--   running           -> cancel requested: the owning worker is told over pub/sub and at its
--                        next heartbeat; it cancels the handler and finishes as cancelled
--
-- KEYS[1] task hash   KEYS[2] delayed   KEYS[3] events
-- ARGV[1] rand   ARGV[2] events maxlen   ARGV[3] task retention ms   ARGV[4] cancel channel
-- Returns: {outcome, status}: outcome "cancelled" | "requested" | "not_found" | "final"
--   (already in a terminal state; status says which)
local task_key, delayed_key, events_key = KEYS[1], KEYS[2], KEYS[3]
local rand, ev_maxlen, retention_ms, cancel_channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local h = rcall('HMGET', task_key, 'st', 'task', 'att', 'grp', 'eid', 'wf')
local st = h[1]
if not st then return {'not_found', ''} end
local _, now_s, now_ms = now_parts()
if st == 'queued' or st == 'scheduled' or st == 'retrying' then
  rcall('ZREM', delayed_key, rand)
  if st == 'queued' and h[4] and not h[5] then
    local base = string.sub(task_key, 1, -(#rand + 3))  -- dtq:{q}:t:<rand> -> dtq:{q}:
    if rcall('ZREM', base .. 'g:' .. h[4] .. ':w', rand) == 1 then rcall('DECR', base .. 'gq:wait') end
  end
  rcall('HSET', task_key, 'st', 'cancelled', 'ft', now_s)
  rcall('PEXPIRE', task_key, retention_ms)
  emit(events_key, ev_maxlen, 'task.cancelled', {rand}, {h[2]}, {h[3] or '0'})
  if h[6] then
    local base = string.sub(task_key, 1, -(#rand + 3))
    wf_note(base, rand, h[6], now_ms)
    wf_signal(base)
  end
  return {'cancelled', 'cancelled'}
end
if st == 'running' then
  rcall('HSET', task_key, 'cxl', '1')
  rcall('PUBLISH', cancel_channel, task_key)
  return {'requested', 'running'}
end
return {'final', st}
