#!lua flags=allow-oom
-- progress: record a running attempt's progress report, fenced by its lease.
--
-- KEYS[1] task hash   KEYS[2] events
-- ARGV[1] lease   ARGV[2] progress JSON   ARGV[3] events maxlen   ARGV[4] rand
-- Returns: 1 when recorded, 0 when the lease is gone.
local h = rcall('HMGET', KEYS[1], 'st', 'lease', 'task', 'att')
if h[1] ~= 'running' or h[2] ~= ARGV[1] then return 0 end
rcall('HSET', KEYS[1], 'prog', ARGV[2])
emit(KEYS[2], ARGV[3], 'task.progress', {ARGV[4]}, {h[3]}, {h[4]}, {progress = ARGV[2]})
return 1
