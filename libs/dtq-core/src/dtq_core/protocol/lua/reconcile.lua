#!lua flags=allow-oom
-- reconcile: repair tasks whose stream entry is gone (an operator's XTRIM or XDEL on a work
-- stream; failure modes F1 and B9, docs/failure-modes.md). The claim and reclaim scripts only
-- ever see entries, so a task whose entry was deleted would otherwise wait forever.
--   queued with no entry          -> a fresh entry (nothing ran; no attempt is spent)
--   running with no pending entry -> as if its lease expired: requeued, or buried when its
--                                    attempt budget is spent, with a stream_entry_lost error
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] dlq   KEYS[12] events
-- ARGV[1] task key prefix   ARGV[2] events maxlen   ARGV[3] task retention ms
-- ARGV[4] dlq enabled   ARGV[5] dlq maxlen   ARGV[6..] rands to check
-- Returns: {restored, requeued, buried}
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local dlq_key, events_key = KEYS[11], KEYS[12]
local prefix, ev_maxlen, retention_ms = ARGV[1], ARGV[2], ARGV[3]
local dlq_enabled, dlq_maxlen = ARGV[4], ARGV[5]
local FIRST_RAND = 6  -- ARGV[6..]: the rands to check
local _, now_s, now_ms = now_parts()
local restored, requeued, buried = {}, {}, {}
local names = {}
local trimmed = new_trimmed()
for i = FIRST_RAND, #ARGV do
  local rand = ARGV[i]
  local key = prefix .. rand
  local h = rcall('HMGET', key, 'st', 'eid', 'pri', 'att', 'max', 'task', 'w', 'grp', 'ct', 'wf')
  if (h[1] == 'queued' or h[1] == 'running') and h[2] and h[3] then
    local stream = stream_key(tonumber(h[3]))
    if h[1] == 'queued' then
      if #rcall('XRANGE', stream, h[2], h[2]) == 0 then
        requeue_entry(stream, nil, rand, key, now_s, h[8])
        restored[#restored + 1] = rand
      end
    elseif #rcall('XPENDING', stream, 'workers', h[2], h[2], 1) == 0 then
      local err = cjson.encode({attempt = tonumber(h[4]), type = 'StreamEntryLost',
        message = 'the stream entry of this attempt was deleted while it ran',
        reason = 'stream_entry_lost', worker = h[7], ts = now_s})
      append_error(key, err)
      rcall('HINCRBY', key, 'lease', 1)
      if tonumber(h[4]) >= tonumber(h[5]) then
        bury(key, rand, h[6], err, dlq_key, dlq_enabled, dlq_maxlen, now_s, retention_ms, prefix, trimmed)
        if h[8] then group_release(prefix, h[8], rand, stream_key, now_s, now_ms) end
        if h[10] then wf_note(group_base(prefix), rand, h[10], now_ms) end
        buried[#buried + 1] = rand
      else
        back_to_queue(prefix, h[8], stream, nil, rand, key, tonumber(h[3]), h[9], stream_key, now_s, now_ms)
        requeued[#requeued + 1] = rand
      end
      names[rand] = h[6]
    end
  end
end
emit(events_key, ev_maxlen, 'task.requeued', restored, nil, nil, EV_REASON, 'stream_entry_lost')
emit(events_key, ev_maxlen, 'task.requeued', requeued, nil, nil, EV_REASON, 'stream_entry_lost')
if #buried > 0 then
  local st = 'task.dead'
  if dlq_enabled ~= '1' then st = 'task.failed' end
  emit(events_key, ev_maxlen, st, buried)
end
emit_trimmed(events_key, ev_maxlen, trimmed)
if #buried > 0 then wf_signal(group_base(prefix)) end
return {#restored, #requeued, #buried}
