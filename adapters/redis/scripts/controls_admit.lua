-- The worker's pause gate for one carrier, atomic with the park (W23, I0).
-- KEYS[1] the execution's control hash (fields paused, cancel_requested: "1" when set)
-- KEYS[2] the execution's parked carriers hash (carrier id -> envelope fields JSON)
-- ARGV[1] "1" when the carrier may be parked (a cancel carrier never is)
-- ARGV[2] the carrier id, ARGV[3] the carrier's fields as JSON
-- Parks iff paused, no cancel requested and parkable (domain.operator_controls.should_park).
-- A carrier parked while the flags have a TTL (the execution ended paused, S5) takes it.
-- Returns {paused, cancel_requested, parked count, parked now (0/1), stranded}: stranded is
-- HGETALL of the parked hash when the execution is not paused (an unpause that stopped
-- half-way left carriers behind), else empty.
local paused = redis.call('HGET', KEYS[1], 'paused') == '1'
local cancel = redis.call('HGET', KEYS[1], 'cancel_requested') == '1'
local parked_now = 0
if paused and not cancel and ARGV[1] == '1' then
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  parked_now = 1
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    redis.call('PEXPIRE', KEYS[2], left)
  end
end
local count = redis.call('HLEN', KEYS[2])
local stranded = {}
if not paused and count > 0 then
  stranded = redis.call('HGETALL', KEYS[2])
end
return {paused and 1 or 0, cancel and 1 or 0, count, parked_now, stranded}
