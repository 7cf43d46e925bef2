#!lua
-- wf_create: store a new workflow (dtq_core.workflows): its steps, their inputs and
-- successors, every step pending. The caller then submits the steps that need no other.
-- KEYS[1] the workflow hash
-- ARGV[1] retention ms   ARGV[2..] field, value pairs (dtq_core.protocol.workflows.encode)
-- Returns: "created" | "exists" (nothing written)
local wf, retention_ms = KEYS[1], ARGV[1]
if rcall('EXISTS', wf) == 1 then return 'exists' end
local _, now_s = now_parts()
rcall('HSET', wf, 'st', 'running', 'ct', now_s, 'ev', 'workflow.started')
local CHUNK = 2000  -- values per HSET (unpack has a stack limit)
for i = 2, #ARGV, CHUNK do
  rcall('HSET', wf, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
end
rcall('PEXPIRE', wf, retention_ms)
return 'created'
