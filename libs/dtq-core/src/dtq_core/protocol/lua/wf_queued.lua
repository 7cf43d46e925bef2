#!lua flags=allow-oom
-- wf_queued: after wf_advance (or the start), record the steps submitted and the events
-- published.
-- KEYS[1] the workflow hash
-- ARGV[1] retention ms   ARGV[2] the events published (the `events` wf_advance answered,
--   "" for none): they leave the pending list, events added since stay
-- ARGV[3..] 2 values per step submitted: step, its task id
-- Returns: the task ids of steps cancelled while they were being submitted (a workflow that
--   failed or was cancelled meanwhile: the caller cancels them), then, last, the events still
--   to publish ("" for none: added since, so the workflow stays pending)
local wf, retention_ms, published = KEYS[1], ARGV[1], ARGV[2]
if rcall('EXISTS', wf) == 0 then return {''} end
local cancel = {}
for k = 3, #ARGV, 2 do
  local j, task_id = ARGV[k], ARGV[k + 1]
  local s = rcall('HGET', wf, 's:' .. j)
  if s == 'pending' then
    rcall('HSET', wf, 's:' .. j, 'queued', 't:' .. j, task_id)
  elseif s == 'cancelled' then
    rcall('HSET', wf, 't:' .. j, task_id)
    cancel[#cancel + 1] = task_id
  end
end
if published ~= '' then
  local ev = rcall('HGET', wf, 'ev') or ''
  if ev == published then
    rcall('HDEL', wf, 'ev')
  elseif string.sub(ev, 1, #published + 1) == published .. ',' then
    rcall('HSET', wf, 'ev', string.sub(ev, #published + 2))
  end
end
rcall('PEXPIRE', wf, retention_ms)
cancel[#cancel + 1] = rcall('HGET', wf, 'ev') or ''
return cancel
