-- Claim one due of a schedule for a holder, while the due still waits (W22): a due after the
-- cursor, or the buffered one (ScheduleState.handles).
-- KEYS[1] the schedule's hash, KEYS[2] the due's claim (same hash tag)
-- ARGV[1] the due (epoch ms), ARGV[2] the holder, ARGV[3] the claim's TTL (ms)
-- Returns 'gone' (no schedule), 'done' (the due was handled), 'held' (another holder's claim
-- has not expired) or 'claimed' (the holder's claim, set or renewed).
local record = redis.call('HMGET', KEYS[1], 'cursor', 'buffered')
if not record[1] then
  return 'gone'
end
if tonumber(ARGV[1]) <= tonumber(record[1]) and record[2] ~= ARGV[1] then
  return 'done'
end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[2] then
  return 'held'
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 'claimed'
