#!lua flags=allow-oom
-- wf_cancel: cancel a running workflow: steps not submitted yet are cancelled here, and the
-- task ids of those submitted and not ended are answered (the caller cancels each task,
-- running ones included).
-- KEYS[1] the workflow hash   ARGV[1] retention ms
-- Returns: {outcome, status, {task ids}}: outcome "cancelled" | "final" (it had ended;
--   status says how) | "not_found"
local wf, retention_ms = KEYS[1], ARGV[1]
local st = rcall('HGET', wf, 'st')
if not st then return {'not_found', '', {}} end
if st ~= 'running' then return {'final', st, {}} end
local _, now_s = now_parts()
wf_over(wf, 'cancelled', now_s)
local ids = wf_stop(wf, {})
rcall('PEXPIRE', wf, retention_ms)
return {'cancelled', 'cancelled', ids}
