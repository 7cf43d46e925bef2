#!lua
-- submit: admit a batch of tasks into one queue (queued, or scheduled when delayed).
-- No allow-oom flag: under maxmemory the whole call is refused up front, nothing half-written.
--
-- KEYS[1..10]  priority streams p0..p9
-- KEYS[11]     delayed sorted set (score: due time in ms)
-- KEYS[12]     queue meta hash
-- KEYS[13]     queue event stream
-- ARGV[1]  task key prefix   dtq:{q}:t:
-- ARGV[2]  idempotency key prefix   dtq:{q}:idem:
-- ARGV[3]  max queue depth (0: unlimited); the queue's own (meta lim_d) takes its place
-- ARGV[4]  task retention ms      ARGV[5]  idempotency ttl ms      ARGV[6]  events maxlen
-- ARGV[7..] 15 fields per task: rand, name, priority, delay_ms, max_attempts, timeout_ms,
--           ttl_ms (0: none), args, kwargs, metadata, headers, idem ("" or "<sha256>|<fingerprint>"),
--           dedup ("" or "<u|d|t>|<sha256 of the dedup key>|<window ms>"), group ("": none),
--           wf ("" or "<workflow id>:<step>": a workflow's step, whose rand is derived from
--           both, so a step submitted again finds itself: outcome "dup")
-- A task with a group that is due now waits in its group until the group has room (see
-- "Groups" in _lib.lua); the queue's depth counts it.
-- Returns: per task three values: outcome, rand, status
--   outcome: "new" | "dup" (same idempotency key and request: rand is the original task;
--            or a workflow step submitted before: rand is that step's task)
--            | "conflict" (same key, other request) | "full" (admission control)
--            | "original" (a dedup mode: the key's task holds it; rand is that task)
--            | "replaced" (debounce: the key's waiting task took these arguments and due time)
-- Dedup keys (`dtq:{q}:dedup:<sha256>` -> the rand of the key's task) are checked against the
-- task they name: until_finished holds while that task is not terminal; throttle while the
-- key lives (its window); debounce while that task is still scheduled.
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local delayed_key, meta, events_key = KEYS[11], KEYS[12], KEYS[13]
local prefix, idem_prefix = ARGV[1], ARGV[2]
local max_depth = tonumber(ARGV[3])
local retention_ms, idem_ttl_ms, ev_maxlen = ARGV[4], ARGV[5], ARGV[6]
local FIRST_ITEM, ITEM_WIDTH = 7, 15  -- ARGV[7..]: 15 values per task
local dedup_prefix = string.sub(prefix, 1, -3) .. 'dedup:'  -- dtq:{q}:t: -> dtq:{q}:dedup:
local TERMINAL = {succeeded = true, failed = true, dead = true, cancelled = true, expired = true}
local deduplicated, dedup_names = {}, {}
local now_us, now_s, now_ms = now_parts()

local mv = rcall('HMGET', meta, 'v', 'lim_d')
if mv[1] ~= '1' then
  for pri = 0, 9 do ensure_group(stream_key(pri)) end
  rcall('HSET', meta, 'v', '1', 'created', now_s)
end
if mv[2] then max_depth = tonumber(mv[2]) end

local depth = 0
if max_depth > 0 then
  for pri = 0, 9 do depth = depth + waiting(stream_key(pri), max_depth) end
  depth = depth + rcall('ZCARD', delayed_key)
  depth = depth + tonumber(rcall('GET', string.sub(prefix, 1, -3) .. 'gq:wait') or '0')
end
local filled = {}

local out = {}
local queued, queued_names, scheduled, scheduled_names = {}, {}, {}, {}
local queued_tr, scheduled_tr  -- the events' trace ids (note_trace), while none is traced: nil
local n = (#ARGV - FIRST_ITEM + 1) / ITEM_WIDTH
for i = 0, n - 1 do
  local b = FIRST_ITEM - 1 + i * ITEM_WIDTH  -- ARGV[b + 1..b + 15]: this task's values
  local rand, name, pri = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
  local delay_ms, max_attempts, timeout_ms = tonumber(ARGV[b + 4]), ARGV[b + 5], ARGV[b + 6]
  local ttl_ms, args, kwargs = tonumber(ARGV[b + 7]), ARGV[b + 8], ARGV[b + 9]
  local metadata, headers, idem = ARGV[b + 10], ARGV[b + 11], ARGV[b + 12]
  local dedup, group, wf = ARGV[b + 13], ARGV[b + 14], ARGV[b + 15]
  local outcome = 'new'
  if wf ~= '' then
    local st = rcall('HGET', prefix .. rand, 'st')
    if st then
      outcome = 'dup'
      out[#out + 1] = 'dup'; out[#out + 1] = rand; out[#out + 1] = st
    end
  end
  local idem_key, fingerprint
  if outcome == 'new' and idem ~= '' then
    local sep = string.find(idem, '|', 1, true)
    idem_key = idem_prefix .. string.sub(idem, 1, sep - 1)
    fingerprint = string.sub(idem, sep + 1)
    local seen = rcall('GET', idem_key)
    if seen then
      local s2 = string.find(seen, '|', 1, true)
      local seen_rand = string.sub(seen, s2 + 1)
      if string.sub(seen, 1, s2 - 1) == fingerprint then
        local st = rcall('HGET', prefix .. seen_rand, 'st') or 'expired'
        outcome = 'dup'
        out[#out + 1] = 'dup'; out[#out + 1] = seen_rand; out[#out + 1] = st
      else
        outcome = 'conflict'
        out[#out + 1] = 'conflict'; out[#out + 1] = seen_rand; out[#out + 1] = ''
      end
    end
  end
  local dedup_key, dedup_mode, dedup_ms
  if outcome == 'new' and dedup ~= '' then
    dedup_mode = string.sub(dedup, 1, 1)
    local s2 = string.find(dedup, '|', 3, true)
    dedup_key = dedup_prefix .. string.sub(dedup, 3, s2 - 1)
    dedup_ms = tonumber(string.sub(dedup, s2 + 1))
    local held = rcall('GET', dedup_key)
    if held then
      local hkey = prefix .. held
      local st = rcall('HGET', hkey, 'st')
      if dedup_mode == 't' or (dedup_mode == 'u' and st and not TERMINAL[st]) then
        outcome = 'original'
        out[#out + 1] = 'original'; out[#out + 1] = held; out[#out + 1] = st or 'expired'
      elseif dedup_mode == 'd' and st == 'scheduled' then
        -- The waiting task takes this submit's arguments and runs debounce_s from now.
        local due_us = now_us + dedup_ms * 1000
        rcall('HSET', hkey, 'args', args, 'kwargs', kwargs, 'due', fmt(due_us))
        if metadata ~= '' then rcall('HSET', hkey, 'meta', metadata) else rcall('HDEL', hkey, 'meta') end
        rcall('ZADD', delayed_key, math.ceil(due_us / 1000), held)
        rcall('PEXPIRE', hkey, retention_ms + dedup_ms)
        rcall('SET', dedup_key, held, 'PX', retention_ms + dedup_ms)
        outcome = 'replaced'
        out[#out + 1] = 'replaced'; out[#out + 1] = held; out[#out + 1] = 'scheduled'
      end
      if outcome ~= 'new' then
        deduplicated[#deduplicated + 1] = held; dedup_names[#dedup_names + 1] = name
      end
    end
  end
  if outcome == 'new' and max_depth > 0 and depth >= max_depth then
    outcome = 'full'
    out[#out + 1] = 'full'; out[#out + 1] = rand; out[#out + 1] = ''
  end
  if outcome == 'new' then
    local key = prefix .. rand
    -- Fields that are still zero (attempts, lease) or left to the task's defaults (max
    -- attempts, timeout) are not written: fewer fields is less memory and less AOF.
    local fields = {key, 'task', name, 'pri', pri, 'args', args, 'kwargs', kwargs,
      'ct', now_s}
    if max_attempts ~= '0' then fields[#fields + 1] = 'max'; fields[#fields + 1] = max_attempts end
    if timeout_ms ~= '0' then fields[#fields + 1] = 'to'; fields[#fields + 1] = timeout_ms end
    if metadata ~= '' then fields[#fields + 1] = 'meta'; fields[#fields + 1] = metadata end
    if headers ~= '' then fields[#fields + 1] = 'hdr'; fields[#fields + 1] = headers end
    if ttl_ms > 0 then
      fields[#fields + 1] = 'exp'; fields[#fields + 1] = fmt(now_us + ttl_ms * 1000)
    end
    if idem_key then
      fields[#fields + 1] = 'idem'; fields[#fields + 1] = string.sub(idem_key, #idem_prefix + 1)
    end
    if group ~= '' then fields[#fields + 1] = 'grp'; fields[#fields + 1] = group end
    if wf ~= '' then fields[#fields + 1] = 'wf'; fields[#fields + 1] = wf end
    local status
    if delay_ms > 0 then
      status = 'scheduled'
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'scheduled'
      fields[#fields + 1] = 'due'; fields[#fields + 1] = fmt(now_us + delay_ms * 1000)
      rcall('HSET', unpack(fields))
      -- The score is the due time rounded up to the ms: never promoted before it is due.
      rcall('ZADD', delayed_key, math.ceil((now_us + delay_ms * 1000) / 1000), rand)
      scheduled[#scheduled + 1] = rand; scheduled_names[#scheduled_names + 1] = name
      if headers ~= '' then scheduled_tr = note_trace(scheduled_tr, #scheduled, headers) end
    elseif group ~= '' then
      status = 'queued'
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'queued'
      fields[#fields + 1] = 'qt'; fields[#fields + 1] = now_s
      rcall('HSET', unpack(fields))
      group_park(prefix, group, rand, pri, now_s, i)
      if not filled[group] then filled[group] = true; filled[#filled + 1] = group end
      queued[#queued + 1] = rand; queued_names[#queued_names + 1] = name
      if headers ~= '' then queued_tr = note_trace(queued_tr, #queued, headers) end
    else
      status = 'queued'
      local eid = rcall('XADD', stream_key(pri), '*', 't', rand)
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'queued'
      fields[#fields + 1] = 'eid'; fields[#fields + 1] = eid
      fields[#fields + 1] = 'qt'; fields[#fields + 1] = now_s
      rcall('HSET', unpack(fields))
      queued[#queued + 1] = rand; queued_names[#queued_names + 1] = name
      if headers ~= '' then queued_tr = note_trace(queued_tr, #queued, headers) end
    end
    -- A delayed task's record must outlive its delay by the full retention.
    rcall('PEXPIRE', key, retention_ms + math.max(0, delay_ms))
    if idem_key then
      rcall('SET', idem_key, fingerprint .. '|' .. rand, 'PX', idem_ttl_ms)
    end
    if dedup_key then
      -- throttle: the window; until_finished and debounce: as long as the task's record.
      local ttl = dedup_mode == 't' and dedup_ms or (retention_ms + math.max(0, delay_ms))
      rcall('SET', dedup_key, rand, 'PX', ttl)
    end
    depth = depth + 1
    out[#out + 1] = 'new'; out[#out + 1] = rand; out[#out + 1] = status
  end
end
-- Each group refills once, after the whole batch waits in it (its priority order holds).
for _, group in ipairs(filled) do group_fill(prefix, group, stream_key, now_s, now_ms) end
emit(events_key, ev_maxlen, 'task.queued', queued, queued_names, nil, nil, nil, queued_tr)
emit(events_key, ev_maxlen, 'task.scheduled', scheduled, scheduled_names, nil, nil, nil, scheduled_tr)
hist_add(group_base(prefix), now_us, {q = #queued + #scheduled})
emit(events_key, ev_maxlen, 'task.deduplicated', deduplicated, dedup_names)
return out
