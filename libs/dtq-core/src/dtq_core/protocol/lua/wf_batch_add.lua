#!lua
-- wf_batch_add: add members to an open batch (refused whole under OOM: it grows the batch) (dtq_core.workflows.Batch): each a step with no
-- input that its callbacks wait for. The caller then submits them and records them with
-- wf_queued.
-- KEYS[1] the batch's workflow hash
-- ARGV[1] retention ms   ARGV[2] the most steps the batch may have   ARGV[3..] the members'
--   definitions (StepDefinition JSON)
-- Returns: {"added", index of the first member added} | {"sealed"} | {"final", status} |
--   {"full", steps it has} | {"not_found"} (nothing written but for "added")
local wf, retention_ms, max_steps = KEYS[1], ARGV[1], tonumber(ARGV[2])
local h = rcall('HMGET', wf, 'st', 'kind', 'sealed', 'n', 'm0')
if not h[1] or h[2] ~= 'batch' then return {'not_found'} end
if h[1] ~= 'running' then return {'final', h[1]} end
if h[3] then return {'sealed'} end
local first, k, callbacks = tonumber(h[4]), #ARGV - 2, tonumber(h[5])
if first + k > max_steps then return {'full', first} end
local waiting = {}
for c = 0, callbacks - 1 do waiting[#waiting + 1] = tostring(c) end
local x = table.concat(waiting, ',')
for j = 0, k - 1 do
  local i = first + j
  rcall('HSET', wf, 's:' .. i, 'pending', 'q:' .. i, ARGV[3 + j])
  if x ~= '' then rcall('HSET', wf, 'x:' .. i, x) end
end
for c = 0, callbacks - 1 do rcall('HINCRBY', wf, 'd:' .. c, k) end
rcall('HINCRBY', wf, 'n', k)
rcall('HINCRBY', wf, 'left', k)
rcall('PEXPIRE', wf, retention_ms)
return {'added', first}
