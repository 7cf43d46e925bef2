-- Shared helpers, at the top of the function library dtq_core.scripts builds.
-- Every key a transition builds from a prefix carries the queue's hash tag, so it lives in
-- the same cluster slot as the KEYS the function declares.

-- redis.call exists only while a function runs, not while the library loads: each function
-- binds it on entry (see dtq_core.scripts.library).
local rcall

-- Server time: every due time, lease and age is Redis time (DESIGN rule 4).
local function now_parts()
  local t = rcall('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  -- tostring() would give 1.7e+15 for a large number; build the string from the parts.
  return us, t[1] .. string.sub('00000' .. t[2], -6), tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n)
  return string.format('%.0f', n)
end

-- One event stream entry per script call and type (a whole batch in one entry).
local function emit(events_key, maxlen, etype, ids, names, attempts, extra)
  if #ids == 0 then return end
  local args = {events_key, 'MAXLEN', '~', maxlen, '*', 'type', etype, 'ids', table.concat(ids, ',')}
  if names then
    args[#args + 1] = 'tasks'; args[#args + 1] = table.concat(names, ',')
  end
  if attempts then
    args[#args + 1] = 'att'; args[#args + 1] = table.concat(attempts, ',')
  end
  if extra then
    for k, v in pairs(extra) do args[#args + 1] = k; args[#args + 1] = v end
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

-- Move a task to its terminal failure state: `dead` with a DLQ copy, or `failed`.
local function bury(task_key, rand, name, err_json, dlq_key, dlq_enabled, dlq_maxlen, now_s, retention_ms)
  if dlq_enabled == '1' then
    local did = rcall('XADD', dlq_key, 'MAXLEN', '~', dlq_maxlen, '*', 't', rand, 'task', name, 'err', err_json)
    rcall('HSET', task_key, 'st', 'dead', 'ft', now_s, 'dlq', did)
  else
    rcall('HSET', task_key, 'st', 'failed', 'ft', now_s)
  end
  rcall('PEXPIRE', task_key, retention_ms)
  if dlq_enabled == '1' then return 'dead' end
  return 'failed'
end

-- Entries of a stream not yet delivered to the group (the group's lag), creating the group
-- when it is missing, counted up to `cap` (enough for admission control). lag is unknown
-- after a deletion at or above the group's position while older entries remain (RELIABILITY
-- on XINFO): then the entries above the last-delivered id are counted. XLEN would count
-- delivered entries that the lazy trim has not dropped yet.
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
