#!lua flags=allow-oom
-- wf_batch_seal: seal a batch: no member is added after, and its callbacks may start once its
-- members have ended (the caller has the scheduler leader kick it). A sealed batch with no
-- callbacks and no member running ends here.
-- KEYS[1] the batch's workflow hash   ARGV[1] retention ms
-- Returns: {"sealed", status} | {"already", status} (sealed before) | {"not_found"}
local wf, retention_ms = KEYS[1], ARGV[1]
local h = rcall('HMGET', wf, 'st', 'kind', 'sealed', 'm0', 'left', 'nfail')
if not h[1] or h[2] ~= 'batch' then return {'not_found'} end
if h[3] or h[1] ~= 'running' then return {'already', h[1]} end
rcall('HSET', wf, 'sealed', '1')
for c = 0, tonumber(h[4]) - 1 do rcall('HINCRBY', wf, 'd:' .. c, -1) end
local st = h[1]
if tonumber(h[5]) == 0 then
  local _, now_s = now_parts()
  st = h[6] and 'failed' or 'succeeded'
  wf_over(wf, st, now_s)
end
rcall('PEXPIRE', wf, retention_ms)
return {'sealed', st}
