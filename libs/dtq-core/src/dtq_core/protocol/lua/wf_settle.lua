#!lua flags=allow-oom
-- wf_settle: take workflows off the pending set once the leader carried out what they had
-- pending, but only those not marked again since it read their marks: a batch's member added
-- meanwhile keeps its batch pending until it is submitted.
-- KEYS[1] the pending set   ARGV[1..] 2 values per workflow: its id, the mark read (ms)
-- Returns: how many were taken off
local pending, n = KEYS[1], 0
for k = 1, #ARGV, 2 do
  local mark = rcall('ZSCORE', pending, ARGV[k])
  if mark and tonumber(mark) <= tonumber(ARGV[k + 1]) then
    rcall('ZREM', pending, ARGV[k])
    n = n + 1
  end
end
return n
