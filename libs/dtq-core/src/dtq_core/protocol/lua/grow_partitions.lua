#!lua
-- grow_partitions: raise a queue's partition count, never lower it (a partition that exists
-- may hold tasks, and a task id names its partition). The caller registered the new
-- partitions in the queue registry first, so whoever reads the new count finds them there.
--
-- KEYS[1] the queue's meta hash (partition 0's)
-- ARGV[1] the count asked for
-- Returns: {count before, count after}. The growth log (`parts_log`, "<count>@<ms>,...") says
-- when each count took effect: a producer placing a task by its idempotency key looks for an
-- earlier placement of the key under the counts of the idempotency window.
local meta_key = KEYS[1]
local wanted = tonumber(ARGV[1])
local before = tonumber(rcall('HGET', meta_key, 'parts') or '1')
if wanted <= before then return {before, before} end
local _, _, now_ms = now_parts()
local entry = wanted .. '@' .. fmt(now_ms)
local log = rcall('HGET', meta_key, 'parts_log')
rcall('HSET', meta_key, 'parts', wanted, 'parts_log', log and (log .. ',' .. entry) or entry)
return {before, wanted}
