#!lua flags=allow-oom
-- history_depth: note a queue's depth in the current minute of its per-minute history
-- (_lib.lua, "Per-minute history"); the scheduler leader calls it for every stored queue once a
-- minute. A second note in the same minute replaces the first.
-- allow-oom: three small fields, bounded by the hash's TTL, and the depth matters most when
-- Redis is full.
--
-- KEYS[1] the queue's meta hash: names the queue's slot (neither read nor written)
-- ARGV[1] task key prefix   ARGV[2] tasks waiting (ready, and in groups)
-- ARGV[3] in flight   ARGV[4] delayed (scheduled and retrying)
-- Returns: 1
local prefix, waiting, in_flight, delayed = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local now_us = now_parts()
local hist, minute = hist_minute(group_base(prefix), now_us)
rcall('HSET', hist, 'd' .. minute, waiting, 'i' .. minute, in_flight, 'y' .. minute, delayed)
rcall('PEXPIRE', hist, HIST_TTL_S * 1000, 'NX')
return 1
