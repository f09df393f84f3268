-- Store a new schedule unless the tenant has one of that id (W22).
-- KEYS[1] the schedule's hash
-- ARGV[1] the definition JSON, ARGV[2] '1' when it is created paused, else '0',
-- ARGV[3] its first cursor (epoch ms: dues after it are its first)
-- Returns 1 when stored; 0, writing nothing, when the schedule exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'definition', ARGV[1], 'paused', ARGV[2], 'cursor', ARGV[3],
  'fired', 0, 'skipped', 0, 'failed', 0)
return 1
