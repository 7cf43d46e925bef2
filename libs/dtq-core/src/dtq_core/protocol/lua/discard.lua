#!lua flags=allow-oom
-- discard: delete dead or failed tasks and their DLQ entries (DLQ discard and purge).
--
-- KEYS[1] dlq   KEYS[2] events
-- ARGV[1] task key prefix   ARGV[2] events maxlen   ARGV[3..] rands
-- Returns: the number discarded (tasks in other states are left alone).
local prefix = ARGV[1]
local ids, names = {}, {}
for i = 3, #ARGV do
  local key = prefix .. ARGV[i]
  local h = rcall('HMGET', key, 'st', 'dlq', 'task')
  if h[1] == 'dead' or h[1] == 'failed' then
    if h[2] then rcall('XDEL', KEYS[1], h[2]) end
    rcall('DEL', key)
    ids[#ids + 1] = ARGV[i]; names[#names + 1] = h[3]
  end
end
emit(KEYS[2], ARGV[2], 'task.discarded', ids, names)
return #ids
