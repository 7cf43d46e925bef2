#!lua flags=allow-oom
-- discard: delete dead or failed tasks and their DLQ entries (DLQ discard and purge).
--
-- KEYS[1] dlq   KEYS[2] events
-- ARGV[1] task key prefix   ARGV[2] events maxlen   ARGV[3..] rands
-- Returns: the number discarded (tasks in other states are left alone).
local dlq_key, events_key = KEYS[1], KEYS[2]
local prefix, ev_maxlen = ARGV[1], ARGV[2]
local FIRST_RAND = 3  -- ARGV[3..]: the rands
local ids, names = {}, {}
for i = FIRST_RAND, #ARGV do
  local key = prefix .. ARGV[i]
  local h = rcall('HMGET', key, 'st', 'dlq', 'task')
  if h[1] == 'dead' or h[1] == 'failed' then
    if h[2] then rcall('XDEL', dlq_key, h[2]) end
    rcall('DEL', key)
    ids[#ids + 1] = ARGV[i]; names[#names + 1] = h[3]
  end
end
emit(events_key, ev_maxlen, 'task.discarded', ids, names)
return #ids
