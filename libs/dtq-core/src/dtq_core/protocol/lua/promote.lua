#!lua flags=allow-oom
-- promote: move due delayed and retrying tasks into their priority streams (scheduler leader).
-- Fenced: the queue keeps the highest leadership epoch it has seen, in its own slot, and a
-- call from an older epoch is refused, so a deposed leader cannot act (no script reads the
-- global lock, which would be cross-slot).
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] delayed   KEYS[12] meta   KEYS[13] events
-- ARGV[1] task key prefix   ARGV[2] leader epoch   ARGV[3] max tasks   ARGV[4] events maxlen
-- ARGV[5] task retention ms
-- Returns: {promoted, next_due_ms or -1}, or an error reply "STALE_LEADER <epoch>"
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local delayed_key, meta_key, events_key = KEYS[11], KEYS[12], KEYS[13]
local prefix, epoch, limit, ev_maxlen = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local retention_ms = ARGV[5]
local seen = tonumber(rcall('HGET', meta_key, 'epoch') or '0')
if epoch < seen then
  return redis.error_reply('STALE_LEADER ' .. seen)
end
if epoch > seen then rcall('HSET', meta_key, 'epoch', epoch) end
local now_us, now_s, now_ms = now_parts()
local due = rcall('ZRANGEBYSCORE', delayed_key, '-inf', now_ms, 'LIMIT', 0, limit)
local ids, names, expired = {}, {}, {}
local steps_ended = false
for _, rand in ipairs(due) do
  rcall('ZREM', delayed_key, rand)
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'pri', 'task', 'exp', 'grp', 'ct', 'wf')
  if h[1] == 'scheduled' or h[1] == 'retrying' then
    if h[4] and tonumber(h[4]) < now_us then
      rcall('HSET', key, 'st', 'expired', 'ft', now_s)
      rcall('PEXPIRE', key, retention_ms)
      expired[#expired + 1] = rand
      if h[7] then wf_note(group_base(prefix), rand, h[7], now_ms); steps_ended = true end
    else
      local pri = tonumber(h[2])
      back_to_queue(prefix, h[5], stream_key(pri), nil, rand, key, pri, h[6], stream_key, now_s, now_ms)
      ids[#ids + 1] = rand; names[#names + 1] = h[3]
    end
  elseif not h[1] then
    -- Its record expired before it was due (failure mode F13, docs/failure-modes.md):
    -- report it, do not drop it.
    expired[#expired + 1] = rand
  end
end
groups_due(prefix, stream_key, now_s, now_ms)
emit(events_key, ev_maxlen, 'task.queued', ids, names, nil, EV_REASON, 'promoted')
emit(events_key, ev_maxlen, 'task.expired', expired)
if #expired > 0 then hist_add(group_base(prefix), now_us, {x = #expired}) end
if steps_ended then wf_signal(group_base(prefix)) end
local nxt = rcall('ZRANGE', delayed_key, 0, 0, 'WITHSCORES')
local next_ms = -1
if nxt[2] then next_ms = tonumber(nxt[2]) end
-- A group its rate holds is due then too (its waiting tasks refill).
local held = rcall('ZRANGE', group_base(prefix) .. 'gq:due', 0, 0, 'WITHSCORES')
if held[2] and (next_ms < 0 or tonumber(held[2]) < next_ms) then next_ms = tonumber(held[2]) end
return {#ids, next_ms}
