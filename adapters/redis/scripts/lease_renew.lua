-- Extend a lease only if it still holds exactly our value ("holder|generation").
-- KEYS[1] lease   ARGV[1] expected value   ARGV[2] ttl in ms
-- Returns 1 when renewed, 0 when the lease was lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
