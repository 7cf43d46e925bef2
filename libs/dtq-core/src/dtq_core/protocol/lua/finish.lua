#!lua flags=allow-oom
-- finish: record the outcome of a batch of attempts, fenced by their lease tokens.
-- allow-oom: finishing acks and trims, which frees memory.
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] delayed   KEYS[12] dlq   KEYS[13] events
-- ARGV[1] task key prefix   ARGV[2] events maxlen   ARGV[3] result retention ms
-- ARGV[4] task retention ms   ARGV[5] dlq enabled ("1"/"0")   ARGV[6] dlq maxlen
-- ARGV[7..9] the run times the worker measured of the attempts it ended (cancelled ones left
--   out), for the queue's per-minute history: how many, their sum and the longest, in µs
-- ARGV[10..] 8 values per attempt: rand, priority, entry id, lease, outcome, payload, extra,
--   children ("" for none: else `<workflow id>:<its fields>`, the children the attempt
--   spawned, made by the scheduler leader from the task's outbox entry; only with "ok")
--   outcome "ok":     payload = result JSON ("" for None), extra = "1" when truncated
--   outcome "retry":  payload = error JSON object, extra = delay ms
--   outcome "dead":   payload = error JSON object (DLQ, or `failed` when the DLQ is off)
--   outcome "cancel": the handler was cancelled on request
-- The attempts recorded are counted in the queue's per-minute history (_lib.lua, hist_add), and
-- the run times with them when the call recorded every attempt it carries (one replayed after a
-- lost reply had its run time counted by the first call).
-- Returns: one status per attempt: the new status, or "stale" when the lease no longer
--   matches (the task was reclaimed and belongs to a newer attempt; nothing is changed and the
--   entry is not acked, because it is not ours any more). A finish sent again because its
--   reply was lost finds its own outcome recorded (field `fin` holds the lease of the attempt
--   whose finish was recorded) and gets the status that outcome set, changing nothing: a
--   worker never reports its own success as stale, and no second event is written.
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local delayed_key, dlq_key, events_key = KEYS[11], KEYS[12], KEYS[13]
local prefix, ev_maxlen = ARGV[1], ARGV[2]
local result_ms, retention_ms = ARGV[3], ARGV[4]
local dlq_enabled, dlq_maxlen = ARGV[5], ARGV[6]
local run_count, run_total, run_longest = ARGV[7], ARGV[8], ARGV[9]
local FIRST_ATTEMPT, STRIDE = 10, 8  -- ARGV[10..]: 8 values per attempt
local now_us, now_s, now_ms = now_parts()
local out = {}
local ev = {succeeded = {}, retrying = {}, dead = {}, failed = {}, cancelled = {}}
local ev_names = {succeeded = {}, retrying = {}, dead = {}, failed = {}, cancelled = {}}
local ev_att = {succeeded = {}, retrying = {}, dead = {}, failed = {}, cancelled = {}}
local ev_tr = {}  -- by status: the trace ids of traced tasks (note_trace)
local touched = {}
-- The status each outcome sets, for a finish that is sent again.
local replayed = {ok = 'succeeded', retry = 'retrying', cancel = 'cancelled', dead = 'failed'}
if dlq_enabled == '1' then replayed.dead = 'dead' end
local trimmed = new_trimmed()
local steps_ended = false  -- workflow steps among the attempts ended (_lib.lua, "Workflows")

for i = FIRST_ATTEMPT, #ARGV, STRIDE do
  local rand, pri, eid, lease = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local outcome, payload, extra, kids = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'lease', 'eid', 'task', 'att', 'fin', 'grp', 'wf', 'hdr')
  local status
  if h[6] == lease then
    status = replayed[outcome]
  elseif h[1] ~= 'running' or h[2] ~= lease or h[3] ~= eid then
    status = 'stale'
  else
    local stream = stream_key(pri)
    if outcome == 'ok' then
      status = 'succeeded'
      if payload == '' then
        rcall('HSET', key, 'st', status, 'ft', now_s)
      else
        rcall('HSET', key, 'st', status, 'ft', now_s, 'res', payload, 'rtr', extra)
      end
      if kids ~= '' then
        local kwf = string.sub(kids, 1, 32)
        rcall('HSET', key, 'kwf', kwf, 'kids', string.sub(kids, 34))
        wf_note(group_base(prefix), rand, kwf .. ':-1', now_ms)
        steps_ended = true
      end
      rcall('PEXPIRE', key, result_ms)
    elseif outcome == 'retry' then
      status = 'retrying'
      append_error(key, payload)
      local delay = tonumber(extra)
      rcall('HSET', key, 'st', status, 'due', fmt(now_us + delay * 1000))
      rcall('ZADD', delayed_key, math.ceil(now_us / 1000 + delay), rand)
      rcall('PEXPIRE', key, retention_ms)
    elseif outcome == 'dead' then
      append_error(key, payload)
      status = bury(key, rand, h[4], payload, dlq_key, dlq_enabled, dlq_maxlen, now_s, retention_ms, prefix, trimmed)
    else
      status = 'cancelled'
      rcall('HSET', key, 'st', status, 'ft', now_s)
      rcall('PEXPIRE', key, retention_ms)
    end
    rcall('HSET', key, 'fin', lease)
    if h[7] then group_release(prefix, h[7], rand, stream_key, now_s, now_ms) end
    if h[8] and status ~= 'retrying' then
      wf_note(group_base(prefix), rand, h[8], now_ms)
      steps_ended = true
    end
    local acks = touched[pri]
    if not acks then
      acks = {}
      touched[pri] = acks
    end
    acks[#acks + 1] = eid
    ev[status][#ev[status] + 1] = rand
    ev_names[status][#ev_names[status] + 1] = h[4]
    ev_att[status][#ev_att[status] + 1] = h[5] or '0'
    if h[9] then ev_tr[status] = note_trace(ev_tr[status], #ev[status], h[9]) end
  end
  out[#out + 1] = status
end

-- Bound the work streams without XDEL per entry: everything below the oldest pending entry
-- has been delivered and acked (one consumer group per stream), so trim up to it. Trimming
-- never touches undelivered entries: they all lie above the group's last-delivered id.
for pri, acks in pairs(touched) do
  local stream = stream_key(pri)
  rcall('XACK', stream, 'workers', unpack(acks))
  local oldest = rcall('XPENDING', stream, 'workers', '-', '+', 1)
  local minid
  if oldest[1] then
    minid = oldest[1][1]
  else
    -- Entries above the group's last-delivered id are undelivered: trim only up to it.
    local groups = rcall('XINFO', 'GROUPS', stream)
    for _, g in ipairs(groups) do
      for j = 1, #g, 2 do
        if g[j] == 'last-delivered-id' then minid = g[j + 1] end
      end
    end
  end
  if minid then rcall('XTRIM', stream, 'MINID', '~', minid) end
end

for status, ids in pairs(ev) do
  emit(events_key, ev_maxlen, 'task.' .. status, ids, ev_names[status], ev_att[status], nil, nil, ev_tr[status])
end
emit_trimmed(events_key, ev_maxlen, trimmed)
local tally = {s = #ev.succeeded, r = #ev.retrying, f = #ev.dead + #ev.failed}
local recorded = #ev.cancelled + tally.s + tally.r + tally.f
if recorded > 0 and recorded == #out and tonumber(run_count) > 0 then
  tally.n, tally.t, tally.mx = tonumber(run_count), tonumber(run_total), tonumber(run_longest)
end
hist_add(group_base(prefix), now_us, tally)
if steps_ended then wf_signal(group_base(prefix)) end
return out
