#!lua flags=allow-oom
-- progress: record a running attempt's progress report, fenced by its lease.
--
-- KEYS[1] task hash   KEYS[2] events
-- ARGV[1] lease   ARGV[2] progress JSON   ARGV[3] events maxlen   ARGV[4] rand
-- Returns: 1 when recorded, 0 when the lease is gone.
local task_key, events_key = KEYS[1], KEYS[2]
local lease, progress, ev_maxlen, rand = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local h = rcall('HMGET', task_key, 'st', 'lease', 'task', 'att')
if h[1] ~= 'running' or h[2] ~= lease then return 0 end
rcall('HSET', task_key, 'prog', progress)
emit(events_key, ev_maxlen, 'task.progress', {rand}, {h[3]}, {h[4]}, EV_PROGRESS, progress)
return 1
