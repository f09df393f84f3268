-- Take an execution's lease with the next fence generation (W3, W4).
-- KEYS[1] lease   KEYS[2] fencegen (never reset, no TTL)
-- ARGV[1] holder id   ARGV[2] ttl in ms
-- Returns the new generation, or nil while another holder has the lease.
-- #include fence_next
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local generation = next_fence(KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. generation, 'PX', ARGV[2])
return generation
