-- Shared helpers, at the top of the function library dtq_core.protocol.scripts builds.
-- Every key a transition builds from a prefix carries the queue's hash tag, so it lives in
-- the same cluster slot as the KEYS the function declares.

-- redis.call exists only while a function runs, not while the library loads: each function
-- binds it on entry (see dtq_core.protocol.scripts.library).
local rcall

-- Server time: every due time, lease and age is Redis time, so no client's clock skew
-- matters (docs/architecture.md, "Task hash fields").
-- A test kit's clock (dtq_core.testing) names the key of an offset in µs added to it; only a
-- library built for that kit has a name here (dtq_core.protocol.library).
local TEST_CLOCK = nil
local function now_parts()
  local t = rcall('TIME')
  if TEST_CLOCK then
    local shifted = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(rcall('GET', TEST_CLOCK) or '0')
    local s = math.floor(shifted / 1000000)
    t = {string.format('%.0f', s), string.format('%.0f', shifted - s * 1000000)}
  end
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
-- report of task.progress), then `tr` when one of the tasks is traced.
local EV_REASON, EV_WORKER, EV_PROGRESS = 'reason', 'w', 'progress'

-- Note the trace id of the n-th task of an event, from the task's headers (their W3C
-- traceparent, `{"traceparent":"00-<trace id>-<span id>-<flags>"...}`); returns the list, made
-- at the first traced task with '' for the tasks before it. Callers skip untraced tasks (no
-- headers), so an untraced batch costs no call and no list; a task after the last traced one
-- has no entry (the reader takes a missing one as untraced).
local function note_trace(traces, n, hdr)
  local id = string.match(hdr, '"traceparent":"%x%x%-(%x+)%-')
  if not id or #id ~= 32 then return traces end
  traces = traces or {}
  for i = #traces + 1, n - 1 do traces[i] = '' end
  traces[n] = id
  return traces
end

-- One event stream entry per script call and type (a whole batch in one entry).
local function emit(events_key, maxlen, etype, ids, names, attempts, detail, value, traces)
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
  if traces then
    args[#args + 1] = 'tr'; args[#args + 1] = table.concat(traces, ',')
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
-- A grouped task's entry names its group too (field `g`), so that a claim meeting the entry of
-- a task whose record is gone still gives the group its turn back.
local function requeue_entry(stream, old_eid, rand, task_key, now_s, gid)
  if old_eid then
    rcall('XACK', stream, 'workers', old_eid)
    rcall('XDEL', stream, old_eid)
  end
  local eid
  if gid then
    eid = rcall('XADD', stream, '*', 't', rand, 'g', gid)
  else
    eid = rcall('XADD', stream, '*', 't', rand)
  end
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

-- Groups (docs/flow-control.md, "Groups"). A task submitted with a group (field `grp`) waits in
-- its group's sorted set, with no stream entry, until the group has room; then it enters its
-- priority stream like any task. The keys, under the queue's hash tag (named from the task
-- prefix, as the task keys are):
--   g:<group>:w     the group's waiting tasks, scored by priority first, then creation time
--   g:<group>:s     its tasks in the streams (rands)
--   g:<group>:r     its tasks running (rands): the group's concurrency slots
--   g:<group>:rate  the GCRA state of the group's rate (µs)
--   gq:all (groups holding tasks)   gq:wait (tasks waiting in groups: the depth counts them)
--   gq:set (group -> its settings: "<weight>", and "p" after it while paused; absent: 1)
--   gq:due (groups their rate holds -> when they may start again, ms)
-- A group has room while fewer than its weight of its tasks are in the streams, and, under a
-- group concurrency limit (meta lim_gc), while its tasks in the streams and running are fewer
-- than the limit. The streams so hold at most `weight` tasks of a group, in the order the groups
-- got room: a weighted round robin, whatever the size of each group's backlog. A slot is a rand
-- in g:<group>:r, added by the claim that starts the attempt and removed by whatever ends it
-- (finish, release, reclaim, reconcile), so it can neither leak nor be freed twice.
-- GROUPS holds what one function call has read of them (each call starts it empty): settings
-- do not change within a call, and a claim or a finish touches many tasks of few groups.
local GROUPS = {}
local PRI_SPAN = 2 ^ 49  -- µs: a waiting score is (9 - priority) * PRI_SPAN + µs since EPOCH_US
local EPOCH_US = 1735689600000000  -- 2025-01-01T00:00:00Z; scores stay exact until 2042

local function group_base(prefix)
  return string.sub(prefix, 1, -3)  -- dtq:{q}:t: -> dtq:{q}:
end

-- The queue's group limits (meta lim_gc, lim_gt), read once per call.
local function group_limits(base)
  local c = GROUPS.limits
  if not c then
    local m = rcall('HMGET', base .. 'meta', 'lim_gc', 'lim_gt')
    c = {concurrency = tonumber(m[1]), rated = m[2] and true or false}
    GROUPS.limits = c
  end
  return c
end

-- One group's settings: {weight, paused}, read once per call (and not at all while no group of
-- the queue has any: the usual case costs one HLEN per call).
local function group_settings(base, gid)
  local seen = GROUPS.settings
  if not seen then
    seen = {}
    GROUPS.settings = seen
    GROUPS.none_set = rcall('HLEN', base .. 'gq:set') == 0
  end
  local s = seen[gid]
  if not s then
    local v = not GROUPS.none_set and rcall('HGET', base .. 'gq:set', gid)
    s = {weight = 1, paused = false}
    if v then
      s.weight = tonumber(string.match(v, '^%d+'))
      s.paused = string.sub(v, -1) == 'p'
    end
    seen[gid] = s
  end
  return s
end

-- How many of a group's tasks run (g: the group's key prefix), read once per call and kept up
-- to date by the call's own changes (group_slot, group_release).
local function group_running(g)
  local counts = GROUPS.running
  if not counts then
    counts = {}
    GROUPS.running = counts
  end
  local n = counts[g]
  if not n then
    n = rcall('SCARD', g .. ':r')
    counts[g] = n
  end
  return n
end

-- A started attempt takes its group's slot; an ended one frees it (a no-op when it holds none
-- any more). The call's count follows, where it was read.
local function group_slot(g, rand, taken)
  local changed = rcall(taken and 'SADD' or 'SREM', g .. ':r', rand) == 1
  local counts = GROUPS.running
  if changed and counts and counts[g] then counts[g] = counts[g] + (taken and 1 or -1) end
end

-- Put a task in its group's waiting set, with no stream entry (the caller acked any old one).
-- Its place: its priority, then its creation time (ct, µs), then `nth` (its rank in the
-- submit that made it), so a task that comes back (a hand-back, a retry) keeps its place.
local function group_park(prefix, gid, rand, pri, ct, nth)
  local base = group_base(prefix)
  local score = (9 - pri) * PRI_SPAN + (tonumber(ct) - EPOCH_US) + nth
  if rcall('ZADD', base .. 'g:' .. gid .. ':w', score, rand) == 1 then
    rcall('INCR', base .. 'gq:wait')
  end
  local listed = GROUPS.listed
  if not listed then
    listed = {}
    GROUPS.listed = listed
  end
  if not listed[gid] then
    rcall('SADD', base .. 'gq:all', gid)
    listed[gid] = true
  end
end

-- Move a group's waiting tasks into their streams while it has room (none while it is paused or
-- its rate holds it). stream_of(pri) names the priority stream. Returns how many moved.
local function group_fill(prefix, gid, stream_of, now_s, now_ms)
  local base = group_base(prefix)
  local settings = group_settings(base, gid)
  if settings.paused then return 0 end
  local limits = group_limits(base)
  if limits.rated then
    local due = rcall('ZSCORE', base .. 'gq:due', gid)
    if due and tonumber(due) > now_ms then return 0 end
  end
  local g = base .. 'g:' .. gid
  local in_streams = rcall('SCARD', g .. ':s')
  local room = settings.weight - in_streams
  if room > 0 and limits.concurrency then
    room = math.min(room, limits.concurrency - in_streams - group_running(g))
  end
  local moved = 0
  while room > 0 do
    local head = rcall('ZPOPMIN', g .. ':w')
    if not head[1] then
      if in_streams + moved == 0 and group_running(g) == 0 then
        rcall('SREM', base .. 'gq:all', gid)  -- the group holds nothing any more
      end
      break
    end
    rcall('DECR', base .. 'gq:wait')
    local rand = head[1]
    local key = prefix .. rand
    local h = rcall('HMGET', key, 'st', 'pri', 'eid')
    if h[1] == 'queued' and not h[3] then  -- else cancelled or gone while it waited: dropped
      requeue_entry(stream_of(tonumber(h[2])), nil, rand, key, now_s, gid)
      rcall('SADD', g .. ':s', rand)
      room = room - 1
      moved = moved + 1
    end
  end
  return moved
end

-- A grouped task goes back to its group (a hand-back, a reclaim, a promotion, a requeue): off
-- its old entry and its slot, into the waiting set; then the group refills.
local function group_return(prefix, gid, stream, old_eid, rand, key, pri, ct, stream_of, now_s, now_ms)
  if old_eid then
    rcall('XACK', stream, 'workers', old_eid)
    rcall('XDEL', stream, old_eid)
  end
  rcall('HDEL', key, 'eid')  -- an earlier attempt's entry (a retry's, a dead task's) too
  local g = group_base(prefix) .. 'g:' .. gid
  group_slot(g, rand, false)
  rcall('SREM', g .. ':s', rand)
  rcall('HSET', key, 'st', 'queued', 'qt', now_s)
  group_park(prefix, gid, rand, pri, ct, 0)
  group_fill(prefix, gid, stream_of, now_s, now_ms)
end

-- An attempt of a grouped task ended: its slot frees and the group refills.
local function group_release(prefix, gid, rand, stream_of, now_s, now_ms)
  group_slot(group_base(prefix) .. 'g:' .. gid, rand, false)
  return group_fill(prefix, gid, stream_of, now_s, now_ms)
end

-- Groups whose rate held them and whose time has come refill (the claim and the promotion).
local function groups_due(prefix, stream_of, now_s, now_ms)
  local base = group_base(prefix)
  local due = rcall('ZRANGEBYSCORE', base .. 'gq:due', '-inf', now_ms, 'LIMIT', 0, 100)
  for _, gid in ipairs(due) do
    rcall('ZREM', base .. 'gq:due', gid)
    group_fill(prefix, gid, stream_of, now_s, now_ms)
  end
end

-- Back to the queue: a grouped task to its group, any other to the tail of its stream.
local function back_to_queue(prefix, gid, stream, old_eid, rand, key, pri, ct, stream_of, now_s, now_ms)
  if gid then
    group_return(prefix, gid, stream, old_eid, rand, key, pri, ct, stream_of, now_s, now_ms)
  else
    requeue_entry(stream, old_eid, rand, key, now_s)
  end
end

-- Workflows (dtq_core.workflows). A step's task names its workflow and step in field `wf`
-- (`<workflow id>:<step>`). The transition that ends it notes it in its queue's outbox
-- (`wfo`, a sorted set of `<rand>|<wf>` by ms), in the same atomic step, and tells the
-- scheduler leader which queue to drain by a message on `<ns>:wf`; the leader advances the
-- workflow (wf_advance) and removes the note, so an ended step is never lost between the two.
local function wf_note(base, rand, wf, now_ms)
  rcall('ZADD', base .. 'wfo', now_ms, rand .. '|' .. wf)
end

local function wf_signal(base)
  local open = string.find(base, ':{', 1, true)  -- dtq:{q}: -> channel dtq:wf, message q
  rcall('PUBLISH', string.sub(base, 1, open) .. 'wf', string.sub(base, open + 2, -3))
end

-- A workflow ends with `status`: its event joins those the leader has yet to publish (`ev`).
local function wf_over(wf, status, now_s)
  rcall('HSET', wf, 'st', status, 'ft', now_s)
  local old = rcall('HGET', wf, 'ev')
  local etype = 'workflow.' .. status
  rcall('HSET', wf, 'ev', (old and old ~= '') and (old .. ',' .. etype) or etype)
end

-- Stop a workflow's steps: those not submitted yet are cancelled; the task ids of those
-- submitted and not recorded as ended are appended to `ids` (for the caller to cancel).
local function wf_stop(wf, ids)
  for j = 0, tonumber(rcall('HGET', wf, 'n')) - 1 do
    local s = rcall('HGET', wf, 's:' .. j)
    if s == 'pending' then
      rcall('HSET', wf, 's:' .. j, 'cancelled')
      rcall('HINCRBY', wf, 'left', -1)
    elseif s == 'queued' then
      ids[#ids + 1] = rcall('HGET', wf, 't:' .. j)
    end
  end
  return ids
end

-- Per-minute history (dtq_core.protocol.history; docs/architecture.md, "Per-minute history").
-- One hash per queue and ten minutes, `hist:<window>` under the queue's hash tag (window: Redis
-- time in s / 600), with one field per metric and minute of the window (`s3`: tasks that
-- succeeded in its fourth minute). The calls that end attempts and the submit count into it in
-- the same atomic step, once per call whatever its batch's size: a tally of the batch (what the
-- call collects for its events anyway, and the run times the worker measured, one triple per
-- finish call) is written with one HINCRBY per metric it holds and a HGET (and HSET) for the
-- longest run time: nothing per task.
-- Ten minutes of eleven metrics stay under Redis's 128-field listpack limit (compact hashes).
-- The key lives HIST_TTL_S from its first write, so every minute in it is kept a day and more.
local HIST_WINDOW_S, HIST_TTL_S = 600, 87060
local HIST_COUNTS = {'q', 's', 'r', 'f', 'x', 'n', 't'}

-- The history hash `now_us` falls in (base: `dtq:{q}:`) and the minute's suffix in it.
local function hist_minute(base, now_us)
  local s = math.floor(now_us / 1000000)
  return base .. 'hist:' .. fmt(math.floor(s / HIST_WINDOW_S)), tostring(math.floor((s % HIST_WINDOW_S) / 60))
end

-- Delete every history hash of a queue that may still live (its windows of the last TTL).
local function hist_drop(base, now_us)
  local last = math.floor(now_us / 1000000 / HIST_WINDOW_S)
  for w = last - math.ceil(HIST_TTL_S / HIST_WINDOW_S), last do
    rcall('DEL', base .. 'hist:' .. fmt(w))
  end
end

-- Write a call's tally into the minute `now_us` falls in; nothing when it is empty. Tally
-- fields: the counts of HIST_COUNTS (q submitted, s succeeded, r retried, f dead or failed,
-- x expired, n run times counted, t their sum in µs), and mx, the longest run time (field m
-- keeps the larger of the two). The TTL is set by the call that creates the hash: a call
-- that creates no field (most calls, all but the first of each minute and metric) cannot
-- have created the hash, so it skips the PEXPIRE (PEXPIRE, not EXPIRE: the ACL users are
-- granted the one dtq sends everywhere, deploy/redis/users.acl.template).
local function hist_add(base, now_us, tally)
  local hist, minute = hist_minute(base, now_us)
  local created = false
  for _, metric in ipairs(HIST_COUNTS) do
    local n = tally[metric]
    if n and n > 0 then
      -- A field only ever grows by n > 0 from its creation: equal to n, it was just made.
      if rcall('HINCRBY', hist, metric .. minute, fmt(n)) == n then created = true end
    end
  end
  if tally.mx then
    local longest = rcall('HGET', hist, 'm' .. minute)
    if not longest or tonumber(longest) < tally.mx then
      if rcall('HSET', hist, 'm' .. minute, fmt(tally.mx)) == 1 then created = true end
    end
  end
  if created then rcall('PEXPIRE', hist, HIST_TTL_S * 1000, 'NX') end
end
