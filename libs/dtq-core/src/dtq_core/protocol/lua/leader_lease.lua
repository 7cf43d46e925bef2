#!lua flags=allow-oom
-- leader_lease: acquire, renew or release the scheduler leader lease (one global key).
-- Renewal is compare-and-PEXPIRE, which Redis allows even under maxmemory (SET is refused).
--
-- KEYS[1] leader key
-- ARGV[1] mode: "acquire" | "renew" | "release"   ARGV[2] token "<epoch>:<replica>"
-- ARGV[3] ttl ms
-- Returns: 1 when the caller holds (or released) the lease, 0 otherwise.
local mode, token = ARGV[1], ARGV[2]
if mode == 'acquire' then
  if rcall('SET', KEYS[1], token, 'NX', 'PX', ARGV[3]) then return 1 end
  return 0
end
if rcall('GET', KEYS[1]) ~= token then return 0 end
if mode == 'renew' then
  rcall('PEXPIRE', KEYS[1], ARGV[3])
else
  rcall('DEL', KEYS[1])
end
return 1
