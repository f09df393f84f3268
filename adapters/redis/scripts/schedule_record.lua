-- Record what became of one due of a schedule and drop its claim (W22). The rule is
-- cron_schedules.record_due's, step for step: the buffered due may still fire or fail; any
-- other due moves the cursor to itself, or was handled already and changes nothing.
-- KEYS[1] the schedule's hash, KEYS[2] the due's claim (same hash tag)
-- ARGV[1] the due (epoch ms), ARGV[2] fired | skipped | buffered | failed,
-- ARGV[3] the execution started ('' for none), ARGV[4] the failure's text ('' for none)
-- Returns 1 when recorded; 0, changing nothing, when the due was handled already or the
-- schedule does not exist.
redis.call('DEL', KEYS[2])
local record = redis.call('HMGET', KEYS[1], 'cursor', 'buffered', 'last_due')
if not record[1] then
  return 0
end
local due = tonumber(ARGV[1])
local outcome = ARGV[2]
if record[2] == ARGV[1] and (outcome == 'fired' or outcome == 'failed') then
  redis.call('HDEL', KEYS[1], 'buffered')
elseif due > tonumber(record[1]) then
  redis.call('HSET', KEYS[1], 'cursor', ARGV[1])
else
  return 0
end
if outcome == 'fired' then
  redis.call('HINCRBY', KEYS[1], 'fired', 1)
  if not record[3] or due >= tonumber(record[3]) then
    redis.call('HSET', KEYS[1], 'last_due', ARGV[1])
    if ARGV[3] == '' then
      redis.call('HDEL', KEYS[1], 'last_execution')
    else
      redis.call('HSET', KEYS[1], 'last_execution', ARGV[3])
    end
  end
elseif outcome == 'skipped' then
  redis.call('HINCRBY', KEYS[1], 'skipped', 1)
elseif outcome == 'buffered' then
  redis.call('HSET', KEYS[1], 'buffered', ARGV[1])
else
  redis.call('HINCRBY', KEYS[1], 'failed', 1)
  redis.call('HSET', KEYS[1], 'last_error', ARGV[4])
end
return 1
