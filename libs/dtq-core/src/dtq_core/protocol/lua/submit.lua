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
-- ARGV[7..] 12 fields per task: rand, name, priority, delay_ms, max_attempts, timeout_ms,
--           ttl_ms (0: none), args, kwargs, metadata, headers, idem ("" or "<sha256>|<fingerprint>")
-- Returns: per task three values: outcome, rand, status
--   outcome: "new" | "dup" (same idempotency key and request: rand is the original task)
--            | "conflict" (same key, other request) | "full" (admission control)
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local delayed_key, meta, events_key = KEYS[11], KEYS[12], KEYS[13]
local prefix, idem_prefix = ARGV[1], ARGV[2]
local max_depth = tonumber(ARGV[3])
local retention_ms, idem_ttl_ms, ev_maxlen = ARGV[4], ARGV[5], ARGV[6]
local FIRST_ITEM, ITEM_WIDTH = 7, 12  -- ARGV[7..]: 12 values per task
local now_us, now_s = now_parts()

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
end

local out = {}
local queued, queued_names, scheduled, scheduled_names = {}, {}, {}, {}
local n = (#ARGV - FIRST_ITEM + 1) / ITEM_WIDTH
for i = 0, n - 1 do
  local b = FIRST_ITEM - 1 + i * ITEM_WIDTH  -- ARGV[b + 1..b + 12]: this task's values
  local rand, name, pri = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3])
  local delay_ms, max_attempts, timeout_ms = tonumber(ARGV[b + 4]), ARGV[b + 5], ARGV[b + 6]
  local ttl_ms, args, kwargs = tonumber(ARGV[b + 7]), ARGV[b + 8], ARGV[b + 9]
  local metadata, headers, idem = ARGV[b + 10], ARGV[b + 11], ARGV[b + 12]
  local outcome = 'new'
  local idem_key, fingerprint
  if idem ~= '' then
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
    local status
    if delay_ms > 0 then
      status = 'scheduled'
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'scheduled'
      fields[#fields + 1] = 'due'; fields[#fields + 1] = fmt(now_us + delay_ms * 1000)
      rcall('HSET', unpack(fields))
      -- The score is the due time rounded up to the ms: never promoted before it is due.
      rcall('ZADD', delayed_key, math.ceil((now_us + delay_ms * 1000) / 1000), rand)
      scheduled[#scheduled + 1] = rand; scheduled_names[#scheduled_names + 1] = name
    else
      status = 'queued'
      local eid = rcall('XADD', stream_key(pri), '*', 't', rand)
      fields[#fields + 1] = 'st'; fields[#fields + 1] = 'queued'
      fields[#fields + 1] = 'eid'; fields[#fields + 1] = eid
      fields[#fields + 1] = 'qt'; fields[#fields + 1] = now_s
      rcall('HSET', unpack(fields))
      queued[#queued + 1] = rand; queued_names[#queued_names + 1] = name
    end
    -- A delayed task's record must outlive its delay by the full retention.
    rcall('PEXPIRE', key, retention_ms + math.max(0, delay_ms))
    if idem_key then
      rcall('SET', idem_key, fingerprint .. '|' .. rand, 'PX', idem_ttl_ms)
    end
    depth = depth + 1
    out[#out + 1] = 'new'; out[#out + 1] = rand; out[#out + 1] = status
  end
end
emit(events_key, ev_maxlen, 'task.queued', queued, queued_names)
emit(events_key, ev_maxlen, 'task.scheduled', scheduled, scheduled_names)
return out
