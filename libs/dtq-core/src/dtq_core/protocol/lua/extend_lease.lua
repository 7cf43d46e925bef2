#!lua flags=allow-oom
-- extend_lease: a worker's heartbeat for the attempts it holds (running or prefetched).
-- Resets each entry's PEL idle time, but only after checking the lease token, because
-- XCLAIM itself checks no ownership and would steal back a reclaimed entry.
--
-- KEYS[1..10] priority streams p0..p9
-- ARGV[1] task key prefix   ARGV[2] consumer name
-- ARGV[3..] 4 values per attempt: rand, priority, entry id, lease
-- Returns: {lost, cancel}: rands whose lease is gone (stop the handler, never finish it), and
--   rands whose cancellation was requested (cancel the handler, then finish as "cancel").
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local prefix, consumer = ARGV[1], ARGV[2]
local FIRST_ATTEMPT = 3  -- ARGV[3..]: 4 values per attempt
local lost, cancel = {}, {}
for i = FIRST_ATTEMPT, #ARGV, 4 do
  local rand, pri, eid, lease = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local h = rcall('HMGET', prefix .. rand, 'st', 'lease', 'eid', 'cxl')
  if h[1] == 'running' and h[2] == lease and h[3] == eid then
    rcall('XCLAIM', stream_key(pri), 'workers', consumer, 0, eid, 'JUSTID')
    if h[4] == '1' then cancel[#cancel + 1] = rand end
  else
    lost[#lost + 1] = rand
  end
end
return {lost, cancel}
