-- take_lease(lease, fencegen, holder, ttl_ms): the lease with the next fence generation
-- (W3, W4); the generation, or false while another holder has the lease.
-- #include fence_next
local function take_lease(lease, fencegen, holder, ttl_ms)
  if redis.call('EXISTS', lease) == 1 then
    return false
  end
  local generation = next_fence(fencegen)
  redis.call('SET', lease, holder .. '|' .. generation, 'PX', ttl_ms)
  return generation
end
