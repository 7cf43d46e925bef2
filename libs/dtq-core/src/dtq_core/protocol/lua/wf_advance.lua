#!lua flags=allow-oom
-- wf_advance: record ended steps of one workflow and answer the steps that may start now.
-- Idempotent: a step's first ended state counts; a step recorded before changes nothing, but
-- its successors are answered again while they wait to be submitted (a drain that stopped
-- half-way), so driving a workflow twice neither loses nor doubles a step.
--
-- KEYS[1] the workflow hash (fields: dtq_core.protocol.workflows)
-- ARGV[1] retention ms   ARGV[2..] 3 values per ended step: step, its state (the task's
--   terminal status), the value its successors get (its result, or an error value, JSON)
-- With no steps given it is a kick: every pending step whose inputs have all ended is
-- answered (the start, and the leader's sweep after a crash); a workflow that is over answers
-- the task ids of its steps submitted and not recorded as ended (to cancel them again).
-- Returns: {status, events, {task ids to cancel}, {ready...}, counts}, or {"not_found"}
--   counts: a batch's {members, succeeded, failed} ({} for another workflow)
--   events: the workflow events not yet published, comma-separated (the caller publishes
--   them and clears them with wf_queued)
--   ready: per step {step, its definition JSON, then step, value of each of its inputs}
-- A failed step under on_failure "fail" fails the workflow: every step not submitted yet is
-- cancelled, and the task ids of those submitted are answered (the caller cancels those that
-- have not started). Under "continue" its successors get its error value and the workflow
-- ends failed; under "ignore" they get null and it can still succeed.
-- A batch (field `kind`) has its callbacks first (steps below `m0`) and its members after; it
-- counts its members' outcomes (`bok`, `bfail`), ends only once sealed, and a callback with a
-- guard (`g:<i>`, on_success) is skipped (cancelled) when a member failed.
local wf, retention_ms = KEYS[1], ARGV[1]
local h0 = rcall('HMGET', wf, 'st', 'kind', 'm0')
local st = h0[1]
if not st then return {'not_found'} end
local m0 = h0[2] == 'batch' and tonumber(h0[3]) or nil
local ENDED = {succeeded = true, failed = true, dead = true, cancelled = true, expired = true}
local _, now_s = now_parts()
local cancel, candidates, seen = {}, {}, {}

local function split(s)
  local t = {}
  if s then for x in string.gmatch(s, '[^,]+') do t[#t + 1] = x end end
  return t
end
-- All steps ended (and a batch sealed): the workflow is over.
local function maybe_end()
  if st == 'running' and tonumber(rcall('HGET', wf, 'left')) == 0
      and (not m0 or rcall('HGET', wf, 'sealed')) then
    st = rcall('HGET', wf, 'nfail') and 'failed' or 'succeeded'
    wf_over(wf, st, now_s)
  end
end
local function successors_of(i)
  for _, j in ipairs(split(rcall('HGET', wf, 'x:' .. i))) do
    if not seen[j] then seen[j] = true; candidates[#candidates + 1] = j end
  end
end

if #ARGV == 1 then
  if st == 'running' then
    for j = 0, tonumber(rcall('HGET', wf, 'n')) - 1 do candidates[#candidates + 1] = tostring(j) end
  else
    wf_stop(wf, cancel)
  end
end
for k = 2, #ARGV, 3 do
  local i, state, value = ARGV[k], ARGV[k + 1], ARGV[k + 2]
  local s = rcall('HGET', wf, 's:' .. i)
  if s and not ENDED[s] then
    rcall('HSET', wf, 's:' .. i, state, 'r:' .. i, value)
    rcall('HINCRBY', wf, 'left', -1)
    if m0 and tonumber(i) >= m0 then
      rcall('HINCRBY', wf, state == 'succeeded' and 'bok' or 'bfail', 1)
    end
    if state ~= 'succeeded' then
      local policy = rcall('HGET', wf, 'p:' .. i) or rcall('HGET', wf, 'pol')
      if policy == 'ignore' then
        rcall('HSET', wf, 'r:' .. i, 'null')
      else
        rcall('HINCRBY', wf, 'nfail', 1)
        if policy == 'fail' and st == 'running' then
          -- This step failed the workflow: its error is the workflow's.
          rcall('HSET', wf, 'err', value, 'errs', i)
          st = 'failed'
          wf_over(wf, st, now_s)
          wf_stop(wf, cancel)
        elseif rcall('HSETNX', wf, 'err', value) == 1 then
          rcall('HSET', wf, 'errs', i)
        end
      end
    end
    for _, j in ipairs(split(rcall('HGET', wf, 'x:' .. i))) do rcall('HINCRBY', wf, 'd:' .. j, -1) end
    maybe_end()
  end
  if st == 'running' then successors_of(i) end
end

local ready = {}
if st == 'running' then
  for _, j in ipairs(candidates) do
    local h = rcall('HMGET', wf, 's:' .. j, 'd:' .. j, 'q:' .. j, 'i:' .. j, 'g:' .. j)
    if h[1] == 'pending' and tonumber(h[2] or '0') <= 0 and h[5]
        and rcall('HGET', wf, 'bfail') then
      -- on_success of a batch a member failed: it never runs.
      rcall('HSET', wf, 's:' .. j, 'cancelled', 'r:' .. j, 'null')
      rcall('HINCRBY', wf, 'left', -1)
      maybe_end()
    elseif h[1] == 'pending' and tonumber(h[2] or '0') <= 0 then
      local entry = {j, h[3]}
      for _, dep in ipairs(split(h[4])) do
        entry[#entry + 1] = dep
        entry[#entry + 1] = rcall('HGET', wf, 'r:' .. dep) or 'null'
      end
      ready[#ready + 1] = entry
    end
  end
end
rcall('PEXPIRE', wf, retention_ms)
local counts = {}
if m0 then
  local c = rcall('HMGET', wf, 'n', 'bok', 'bfail')
  counts = {tonumber(c[1]) - m0, tonumber(c[2] or '0'), tonumber(c[3] or '0')}
end
return {st, rcall('HGET', wf, 'ev') or '', cancel, ready, counts}
