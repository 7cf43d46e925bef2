#!lua flags=allow-oom
-- reclaim: take back attempts whose worker stopped heartbeating for the visibility timeout,
-- and entries delivered to a worker that never received them (its wake-up read's reply was
-- lost), which go back as they were.
-- Each such task goes back to the tail of its stream (attempts stay counted: they were
-- counted at claim, so a task that kills its workers spends its budget), or, when its budget
-- is spent, to the DLQ with a lease_expired entry in its error history.
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] dlq   KEYS[12] events
-- ARGV[1] task key prefix   ARGV[2] reaper consumer name   ARGV[3] min idle ms (the timeout)
-- ARGV[4] max entries this call (and at most 10x as many PEL entries scanned per stream)
-- ARGV[5] events maxlen   ARGV[6] task retention ms
-- ARGV[7] dlq enabled   ARGV[8] dlq maxlen
-- ARGV[9..18] XAUTOCLAIM cursor per stream p0..p9 ("0-0" to start over)
-- Returns: {requeued, buried, lost, cursors (10 values, p0..p9)}
--   lost: PEL entries whose stream entry had been deleted (an operator's XTRIM); XAUTOCLAIM
--   reports them once and drops them from the PEL (failure mode F1, docs/failure-modes.md).
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local dlq_key, events_key = KEYS[11], KEYS[12]
local prefix, reaper, min_idle = ARGV[1], ARGV[2], ARGV[3]
local budget, ev_maxlen, retention_ms = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local max_entries = budget
local dlq_enabled, dlq_maxlen = ARGV[7], ARGV[8]
local function cursor_of(pri) return ARGV[9 + pri] end  -- ARGV[9..18]: p0..p9
local now_us, now_s, now_ms = now_parts()
local requeued, requeued_names, dead, dead_names, failed, failed_names = {}, {}, {}, {}, {}, {}
local lost = 0
local trimmed = new_trimmed()
local steps_ended = false
local cursors = {}
for pri = 9, 0, -1 do
  local stream = stream_key(pri)
  local cursor = cursor_of(pri)
  -- XAUTOCLAIM scans at most 10 x COUNT PEL entries per call: an empty answer is not "done";
  -- follow the cursor to 0-0 (failure mode F3, docs/failure-modes.md). The scan is bounded too,
  -- not only the entries taken: a PEL of entries not idle yet (a worker that died a moment ago
  -- holding 50,000, or many live workers) would otherwise be walked whole in one call. The cursor
  -- is handed back and the caller goes on at once.
  local scan_left = 10 * max_entries
  while budget > 0 and scan_left > 0 do
    local count = math.min(budget, 100, math.ceil(scan_left / 10))
    scan_left = scan_left - 10 * count
    local reply = redis.pcall('XAUTOCLAIM', stream, 'workers', reaper, min_idle, cursor,
      'COUNT', count)
    if type(reply) == 'table' and reply.err then
      cursor = '0-0'
      break
    end
    cursor = reply[1]
    for _, entry in ipairs(reply[2]) do
      budget = budget - 1
      local eid, rand = entry[1], entry[2][2]
      local key = prefix .. rand
      local h = rcall('HMGET', key, 'st', 'eid', 'att', 'max', 'task', 'w', 'grp', 'ct', 'wf')
      if h[1] == 'queued' and h[2] == eid then
        -- Delivered by a worker's wake-up read whose reply never reached it (a dropped
        -- connection): never started, so no attempt was spent. Back to its stream as it was.
        requeue_entry(stream, eid, rand, key, now_s, h[7])
        requeued[#requeued + 1] = rand; requeued_names[#requeued_names + 1] = h[5]
      elseif h[1] ~= 'running' or h[2] ~= eid then
        rcall('XACK', stream, 'workers', eid)
        rcall('XDEL', stream, eid)
      else
        local err = cjson.encode({attempt = tonumber(h[3]), type = 'LeaseExpired',
          message = 'worker ' .. (h[6] or '?') .. ' stopped heartbeating for ' .. min_idle .. ' ms',
          reason = 'lease_expired', worker = h[6], ts = now_s})
        append_error(key, err)
        rcall('HINCRBY', key, 'lease', 1)
        if tonumber(h[3]) >= tonumber(h[4]) then
          rcall('XACK', stream, 'workers', eid)
          rcall('XDEL', stream, eid)
          local st = bury(key, rand, h[5], err, dlq_key, dlq_enabled, dlq_maxlen, now_s, retention_ms, prefix, trimmed)
          if h[7] then group_release(prefix, h[7], rand, stream_key, now_s, now_ms) end
          if h[9] then wf_note(group_base(prefix), rand, h[9], now_ms); steps_ended = true end
          if st == 'dead' then
            dead[#dead + 1] = rand; dead_names[#dead_names + 1] = h[5]
          else
            failed[#failed + 1] = rand; failed_names[#failed_names + 1] = h[5]
          end
        else
          back_to_queue(prefix, h[7], stream, eid, rand, key, pri, h[8], stream_key, now_s, now_ms)
          requeued[#requeued + 1] = rand; requeued_names[#requeued_names + 1] = h[5]
        end
      end
    end
    lost = lost + #reply[3]
    if cursor == '0-0' then break end
  end
  cursors[pri + 1] = cursor
end
emit(events_key, ev_maxlen, 'task.requeued', requeued, requeued_names, nil, EV_REASON, 'lease_expired')
emit(events_key, ev_maxlen, 'task.dead', dead, dead_names)
emit(events_key, ev_maxlen, 'task.failed', failed, failed_names)
hist_add(group_base(prefix), now_us, {f = #dead + #failed})
emit_trimmed(events_key, ev_maxlen, trimmed)
if steps_ended then wf_signal(group_base(prefix)) end
return {#requeued, #dead + #failed, lost, cursors}
