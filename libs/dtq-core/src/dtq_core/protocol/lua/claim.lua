#!lua flags=allow-oom
-- claim: start up to COUNT tasks of one queue in strict priority order, p9 first.
-- allow-oom: claiming frees memory downstream (finished tasks are trimmed); workers must keep
-- draining when Redis is full.
--
-- KEYS[1..10]  priority streams p0..p9     KEYS[11] queue event stream
-- KEYS[12]     the queue's rate state (the theoretical arrival time of GCRA, µs)
-- ARGV[1] task key prefix   ARGV[2] consumer name   ARGV[3] count   ARGV[4] events maxlen
-- The queue's meta hash (its paused flag) is only read, and is named from the prefix like the
-- task keys, not passed as a key: FCALL needs write access to every key it is passed, and the
-- worker's ACL user may only read meta (it holds the leader epoch that fences promotion).
-- ARGV[5] task retention ms
-- ARGV[6] the worker's task defaults, JSON: {"*": [max_attempts, timeout_ms],
--         "<task name>": [max_attempts or 0, timeout_ms or 0], ...}. A task submitted without
--         max_attempts or timeout (stored as 0) gets them resolved and stored at its first claim.
-- ARGV[7..] adopted entries, three values each: priority, entry id, rand. These were delivered
--           to this consumer by its blocking wake-up read; they are started first.
-- Returns: {state, n, wait_ms, then 12 values per started task:
--           rand, priority, entry id, lease, attempt, max_attempts, timeout_ms, name, args,
--           kwargs, headers, queued_at_us}
--   state: "ok" | "paused" (nothing claimed; adopted entries were handed back)
--          | "full" (the queue's concurrency limit left room for fewer than asked)
--          | "limited" (its rate limit did; wait_ms: when the next task may start)
-- Limits (docs/flow-control.md) come from the meta hash: lim_c, tasks of the queue (partition)
-- started and not ended, counted as its pending entries: an attempt holds its slot from the
-- claim that delivers its entry to the finish, hand-back or reclaim that acks it, so a crashed
-- worker's slots free when its entries are reclaimed and never before; lim_t and lim_b, the
-- rate's emission interval (µs per task) and burst, checked against Redis time (GCRA).
-- A count of 0 hands the adopted entries back without claiming (a stopping worker).
-- A task is started only when its hash says `queued` and names this very entry, so a
-- duplicate or stale entry can never become a second execution; such entries, and entries of
-- cancelled or expired tasks, are acked and deleted here (never left in the PEL).
-- A grouped task (field `grp`, see "Groups" in _lib.lua) takes its group's slot here; one whose
-- group is paused, full (group_concurrency lowered since it entered the stream) or held by the
-- group's rate (meta lim_gt and lim_gb, GCRA per group) goes back to its group's waiting set
-- instead, never to a worker.
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local events_key, rate_key = KEYS[11], KEYS[12]
local prefix, consumer, count = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ev_maxlen, retention_ms = ARGV[4], ARGV[5]
local defaults = cjson.decode(ARGV[6])
local FIRST_ADOPTED = 7  -- ARGV[7..]: 3 values per adopted entry
local now_us, now_s, now_ms = now_parts()

local base = group_base(prefix)
local meta = base .. 'meta'  -- dtq:{q}:t: -> dtq:{q}:meta
local m = rcall('HMGET', meta, 'paused', 'lim_c', 'lim_t', 'lim_b', 'lim_gc', 'lim_gt', 'lim_gb')
local group_limit = tonumber(m[5])
local group_interval, group_burst = tonumber(m[6]), tonumber(m[7] or '1')
local paused = m[1] == '1'
local state, wait_ms = 'ok', 0
local n_adopted = (#ARGV - FIRST_ADOPTED + 1) / 3
local asked = count
local rate_t, rate_tat
if not paused and count > 0 and m[2] then
  local used = 0
  for pri = 0, 9 do
    local p = redis.pcall('XPENDING', stream_key(pri), 'workers')
    if type(p) == 'table' and not p.err then used = used + p[1] end
  end
  -- The adopted entries are pending already: starting them takes no more room.
  local room = tonumber(m[2]) - used + n_adopted
  if room < count then count = math.max(room, 0); state = 'full' end
end
if not paused and count > 0 and m[3] then
  rate_t = tonumber(m[3])
  local burst = tonumber(m[4] or '1')
  rate_tat = math.max(tonumber(rcall('GET', rate_key) or '0'), now_us)
  local allowed = math.floor((now_us + burst * rate_t - rate_tat) / rate_t)
  if allowed < count then
    count = math.max(allowed, 0)
    state = 'limited'
    wait_ms = math.max(1, math.ceil((rate_tat + rate_t - burst * rate_t - now_us) / 1000))
  end
end

-- Hand back the adopted entries beyond what may start (all of them when paused or stopping).
local keep = (paused or asked == 0) and 0 or math.min(count, n_adopted)
if keep < n_adopted then
  for i = FIRST_ADOPTED + 3 * keep, #ARGV, 3 do
    local stream, eid, rand = stream_key(tonumber(ARGV[i])), ARGV[i + 1], ARGV[i + 2]
    local key = prefix .. rand
    local h = rcall('HMGET', key, 'st', 'eid', 'grp')
    if h[1] == 'queued' and h[2] == eid then
      requeue_entry(stream, eid, rand, key, now_s, h[3])
    elseif h[1] == 'running' and h[2] == eid then
      -- Started by a claim whose reply was lost: its lease decides (the reaper takes it back).
    else
      rcall('XACK', stream, 'workers', eid)
      rcall('XDEL', stream, eid)
    end
  end
end
if paused then return {'paused', 0, 0} end
if asked > 0 then groups_due(prefix, stream_key, now_s, now_ms) end
if count == 0 then return {asked == 0 and 'ok' or state, 0, wait_ms} end
local last_adopted = FIRST_ADOPTED + 3 * keep - 1

local out = {state, 0, wait_ms}
local started, names, attempts, expired = {}, {}, {}, {}
local started_tr  -- the started tasks' trace ids (note_trace), from their headers
local again = 0
local steps_ended = false  -- workflow steps expired here (_lib.lua, "Workflows")
local refilled = 0  -- entries groups added to the streams during this call

-- Append one started attempt to the reply (12 values; h is the task's HMGET below).
local function report(rand, pri, eid, lease, att, max, to, h)
  local n = #out
  out[n + 1] = rand; out[n + 2] = pri; out[n + 3] = eid; out[n + 4] = lease
  out[n + 5] = att; out[n + 6] = max; out[n + 7] = to; out[n + 8] = h[8]
  out[n + 9] = h[9]; out[n + 10] = h[10]; out[n + 11] = h[11] or ''; out[n + 12] = h[12] or now_s
end

-- Whether a grouped task may take its group's slot now; when not, it waits in its group again.
local function group_admits(gid, stream, eid, rand, key, pri, ct)
  local g = base .. 'g:' .. gid
  rcall('SREM', g .. ':s', rand)
  local admitted = not group_settings(base, gid).paused
    and not (group_limit and group_running(g) >= group_limit)
  local tat
  if admitted and group_interval then
    tat = math.max(tonumber(rcall('GET', g .. ':rate') or '0'), now_us)
    if now_us + group_burst * group_interval - tat < group_interval then
      admitted = false
      local at = math.ceil((tat + group_interval - group_burst * group_interval) / 1000)
      rcall('ZADD', base .. 'gq:due', at, gid)
    end
  end
  if not admitted then
    group_return(prefix, gid, stream, eid, rand, key, pri, ct, stream_key, now_s, now_ms)
    return false
  end
  if tat then
    tat = tat + group_interval
    rcall('SET', g .. ':rate', fmt(tat), 'PX', math.ceil((tat - now_us) / 1000) + 1000)
  end
  group_slot(g, rand, true)
  return true
end

-- egid: the group the entry names (absent on an adopted entry: the record says).
local function start(stream, pri, eid, rand, egid)
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'eid', 'exp', 'att', 'lease', 'max', 'to', 'task',
    'args', 'kwargs', 'hdr', 'qt', 'grp', 'ct', 'wf')
  local gid = h[13] or egid
  if h[1] == 'running' and h[2] == eid then
    -- Started from this very entry already: a retried claim whose first reply was lost (the
    -- connection dropped) adopts it again. Never ack an entry an attempt stands on. Ours:
    -- report it again as it is (same attempt, same lease); another worker's: leave it.
    if rcall('HGET', key, 'w') == consumer then
      report(rand, pri, eid, h[5], h[4], h[6], h[7], h)
      again = again + 1  -- its task.started event went out with the first call
    end
    return
  end
  if h[1] ~= 'queued' or h[2] ~= eid then
    rcall('XACK', stream, 'workers', eid)
    rcall('XDEL', stream, eid)
    if gid and (h[2] == eid or not h[1]) then
      -- Cancelled (or its record gone) while it stood in the stream: its group's room frees.
      rcall('SREM', base .. 'g:' .. gid .. ':s', rand)
      refilled = refilled + group_fill(prefix, gid, stream_key, now_s, now_ms)
    end
    if not h[1] then
      -- Its record expired while it waited (failure mode F13, docs/failure-modes.md):
      -- report it, do not drop it.
      expired[#expired + 1] = rand
    end
    return
  end
  if h[3] and tonumber(h[3]) < now_us then
    rcall('XACK', stream, 'workers', eid)
    rcall('XDEL', stream, eid)
    rcall('HSET', key, 'st', 'expired', 'ft', now_s)
    rcall('PEXPIRE', key, retention_ms)
    expired[#expired + 1] = rand
    if h[15] then wf_note(base, rand, h[15], now_ms); steps_ended = true end
    if gid then
      rcall('SREM', base .. 'g:' .. gid .. ':s', rand)
      refilled = refilled + group_fill(prefix, gid, stream_key, now_s, now_ms)
    end
    return
  end
  if gid and not group_admits(gid, stream, eid, rand, key, pri, h[14]) then return end
  local att = tonumber(h[4] or '0') + 1
  local lease = tonumber(h[5] or '0') + 1
  local max, to = h[6] or '0', h[7] or '0'
  local fields = {key, 'st', 'running', 'att', att, 'lease', lease, 'sa', now_s, 'w', consumer}
  if max == '0' or to == '0' then
    local own = defaults[h[8]] or {0, 0}
    local fallback = defaults['*']
    if max == '0' then
      max = own[1] ~= 0 and own[1] or fallback[1]
      fields[#fields + 1] = 'max'; fields[#fields + 1] = max
    end
    if to == '0' then
      to = own[2] ~= 0 and own[2] or fallback[2]
      fields[#fields + 1] = 'to'; fields[#fields + 1] = to
    end
  end
  rcall('HSET', unpack(fields))
  report(rand, pri, eid, lease, att, max, to, h)
  started[#started + 1] = rand; names[#names + 1] = h[8]; attempts[#attempts + 1] = att
  if h[11] then started_tr = note_trace(started_tr, #started, h[11]) end
  if gid then refilled = refilled + group_fill(prefix, gid, stream_key, now_s, now_ms) end
end

for i = FIRST_ADOPTED, last_adopted, 3 do
  local pri = tonumber(ARGV[i])
  start(stream_key(pri), pri, ARGV[i + 1], ARGV[i + 2])
end

-- Groups refill the streams as their tasks start: read again while they did and room is left
-- (a few passes at most; each takes the groups' next tasks in turn).
local passes = 0
repeat
  refilled = 0
  passes = passes + 1
  for pri = 9, 0, -1 do
    local stream = stream_key(pri)
    while #started + again < count do
      local want = count - #started - again
      local reply = redis.pcall('XREADGROUP', 'GROUP', 'workers', consumer, 'COUNT', want,
        'STREAMS', stream, '>')
      if type(reply) == 'table' and reply.err then
        -- NOGROUP: the stream or its group is gone (data loss, or an operator's DEL).
        ensure_group(stream)
        break
      end
      if not reply then break end
      local entries = reply[1][2]
      for _, entry in ipairs(entries) do
        start(stream, pri, entry[1], entry[2][2], entry[2][4])
      end
      -- Skipped entries leave the batch short; read this stream again only while it had more.
      if #entries < want then break end
    end
    if #started + again >= count then break end
  end
until refilled == 0 or #started + again >= count or passes >= 64

out[2] = #started + again
if rate_t and #started > 0 then
  -- Each start moves the theoretical arrival time on by one interval; the key outlives it.
  local tat = rate_tat + #started * rate_t
  rcall('SET', rate_key, fmt(tat), 'PX', math.ceil((tat - now_us) / 1000) + 1000)
end
emit(events_key, ev_maxlen, 'task.started', started, names, attempts, EV_WORKER, consumer, started_tr)
emit(events_key, ev_maxlen, 'task.expired', expired)
if #expired > 0 then hist_add(base, now_us, {x = #expired}) end
if steps_ended then wf_signal(base) end
return out
