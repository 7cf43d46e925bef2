#!lua
-- register_queues: add queue names to the queue registry, never beyond its bound, so no
-- number of submits or worker starts can grow it (and the per-queue keys and metric series
-- it stands for) without limit.
--
-- KEYS[1] queue registry set
-- ARGV[1] most queues the registry may hold (0: no bound)   ARGV[2..] queue names
-- Returns: one flag per name: 1 registered (now or before), 0 refused (the registry is full).
local limit = tonumber(ARGV[1])
local size = rcall('SCARD', KEYS[1])
local out = {}
for i = 2, #ARGV do
  if rcall('SISMEMBER', KEYS[1], ARGV[i]) == 1 then
    out[#out + 1] = 1
  elseif limit == 0 or size < limit then
    rcall('SADD', KEYS[1], ARGV[i])
    size = size + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
