-- Shared helpers, at the top of the function library dtq_core.protocol.scripts builds.
-- Every key a transition builds from a prefix carries the queue's hash tag, so it lives in
-- the same cluster slot as the KEYS the function declares.

-- redis.call exists only while a function runs, not while the library loads: each function
-- binds it on entry (see dtq_core.protocol.scripts.library).
local rcall

-- Server time: every due time, lease and age is Redis time, so no client's clock skew
-- matters (docs/architecture.md, "Task hash fields").
local function now_parts()
  local t = rcall('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- tostring() would give 1.7e+15 for a large number; build the string from the parts.
  return us, t[1] .. string.sub('00000' .. t[2], -6), tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- The event stream's fields (dtq_core.messages.EventField, docs/events.md): every entry has
-- `type` and `ids`, then `tasks` and `att` when given, then at most one detail field, named by
-- one of these (the reason of a requeue, cancel or discard; the worker of task.started; the
-- report of task.progress).
local EV_REASON, EV_WORKER, EV_PROGRESS = 'reason', 'w', 'progress'

-- One event stream entry per script call and type (a whole batch in one entry).
local function emit(events_key, maxlen, etype, ids, names, attempts, detail, value)
  if #ids == 0 then return end
  local args = {events_key, 'MAXLEN', '~', maxlen, '*', 'type', etype, 'ids', table.concat(ids, ',')}
  if names then
    args[#args + 1] = 'tasks'; args[#args + 1] = table.concat(names, ',')
  end
  if attempts then
    args[#args + 1] = 'att'; args[#args + 1] = table.concat(attempts, ',')
  end
  if detail then
    args[#args + 1] = detail; args[#args + 1] = value
  end
  rcall('XADD', unpack(args))
end

-- Append one JSON object to the task's error history (a JSON array in field `err`).
local function append_error(task_key, err_json)
  local old = rcall('HGET', task_key, 'err')
  if not old or old == '' or old == '[]' then
    rcall('HSET', task_key, 'err', '[' .. err_json .. ']')
  else
    rcall('HSET', task_key, 'err', string.sub(old, 1, -2) .. ',' .. err_json .. ']')
  end
end

-- Put a task back at the tail of its priority stream as a fresh, undelivered entry.
-- The old entry is acked and deleted in the same step, so the task is never in two places.
local function requeue_entry(stream, old_eid, rand, task_key, now_s)
  if old_eid then
    rcall('XACK', stream, 'workers', old_eid)
    rcall('XDEL', stream, old_eid)
  end
  local eid = rcall('XADD', stream, '*', 't', rand)
  rcall('HSET', task_key, 'st', 'queued', 'eid', eid, 'qt', now_s)
  return eid
end

-- Make sure the consumer group exists (created at id 0 so nothing already there is skipped).
local function ensure_group(stream)
  local ok = redis.pcall('XGROUP', 'CREATE', stream, 'workers', '0', 'MKSTREAM')
  if type(ok) == 'table' and ok.err and not string.find(ok.err, 'BUSYGROUP') then
    error(ok.err)
  end
end

-- The most DLQ entries one bury() trims. One new entry per bury and up to this many removed
-- keep a DLQ at its cap; a cap lowered by far shrinks by this much per dead task, so no call
-- deletes more than this many records.
local DLQ_TRIM_BATCH = 100

-- Trim the DLQ to `maxlen` entries, and delete the record of each task whose entry goes: a
-- dead task's record outlives its DLQ entry by nothing (an XADD MAXLEN would drop entries
-- without saying which, leaving their records for the task retention, unreachable from the
-- DLQ). A record that names another entry (requeued and dead again since) stays.
-- `trimmed` collects {ids, names} of the deleted tasks for one task.discarded event.
local function trim_dlq(dlq_key, prefix, maxlen, trimmed)
  local excess = rcall('XLEN', dlq_key) - tonumber(maxlen)
  if excess <= 0 then return end
  local entries = rcall('XRANGE', dlq_key, '-', '+', 'COUNT', math.min(excess, DLQ_TRIM_BATCH))
  local eids = {}
  for _, e in ipairs(entries) do
    eids[#eids + 1] = e[1]
    local f = {}
    for j = 1, #e[2], 2 do f[e[2][j]] = e[2][j + 1] end
    if f['t'] then
      local key = prefix .. f['t']
      local h = rcall('HMGET', key, 'st', 'dlq')
      if h[1] == 'dead' and h[2] == e[1] then
        rcall('DEL', key)
        trimmed.ids[#trimmed.ids + 1] = f['t']
        trimmed.names[#trimmed.names + 1] = f['task'] or ''
      end
    end
  end
  if #eids > 0 then rcall('XDEL', dlq_key, unpack(eids)) end
end

-- An empty collector for trim_dlq.
local function new_trimmed()
  return {ids = {}, names = {}}
end

-- The one task.discarded event (reason dlq_trimmed) of the records a call's trims deleted.
local function emit_trimmed(events_key, maxlen, trimmed)
  emit(events_key, maxlen, 'task.discarded', trimmed.ids, trimmed.names, nil, EV_REASON, 'dlq_trimmed')
end

-- Move a task to its terminal failure state: `dead` with a DLQ copy, or `failed`.
local function bury(task_key, rand, name, err_json, dlq_key, dlq_enabled, dlq_maxlen, now_s, retention_ms, prefix, trimmed)
  if dlq_enabled == '1' then
    local did = rcall('XADD', dlq_key, '*', 't', rand, 'task', name, 'err', err_json)
    rcall('HSET', task_key, 'st', 'dead', 'ft', now_s, 'dlq', did)
    rcall('PEXPIRE', task_key, retention_ms)
    trim_dlq(dlq_key, prefix, dlq_maxlen, trimmed)
    return 'dead'
  end
  rcall('HSET', task_key, 'st', 'failed', 'ft', now_s)
  rcall('PEXPIRE', task_key, retention_ms)
  return 'failed'
end

-- Entries of a stream not yet delivered to the group (the group's lag), creating the group
-- when it is missing, counted up to `cap` (enough for admission control). lag is unknown
-- after a deletion at or above the group's position while older entries remain (the `lag`
-- field of XINFO GROUPS, redis.io): then the entries above the last-delivered id are
-- counted. XLEN would count delivered entries that the lazy trim has not dropped yet.
local function waiting(stream, cap)
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if groups.err then
    ensure_group(stream)
    return 0
  end
  for _, g in ipairs(groups) do
    local fields = {}
    for i = 1, #g, 2 do fields[g[i]] = g[i + 1] end
    if fields['name'] == 'workers' then
      if fields['lag'] then return fields['lag'] end
      return #rcall('XRANGE', stream, '(' .. fields['last-delivered-id'], '+', 'COUNT', cap)
    end
  end
  ensure_group(stream)
  return rcall('XLEN', stream)
end
