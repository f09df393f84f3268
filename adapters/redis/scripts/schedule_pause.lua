-- Pause or unpause a schedule (W22). Unpausing moves the cursor up to now, so dues that fell
-- while it was paused are passed over (cron_schedules.resumed).
-- KEYS[1] the schedule's hash
-- ARGV[1] '1' to pause, '0' to unpause, ARGV[2] now (epoch ms)
-- Returns the hash after (HGETALL), or an empty list when the schedule does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
else
  if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[1], 'cursor')) then
    redis.call('HSET', KEYS[1], 'cursor', ARGV[2])
  end
  redis.call('HSET', KEYS[1], 'paused', '0')
end
return redis.call('HGETALL', KEYS[1])
