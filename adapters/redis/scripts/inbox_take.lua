-- One wait of one execution takes one inbox event, unless another wait took it (V6).
-- KEYS[1] taken hash, KEYS[2] inbox list
-- ARGV[1] field "<execution_id>\31<event_id>", ARGV[2] subscription id, ARGV[3] ttl ms
-- Returns the subscription that holds the event for that execution (set-if-absent).
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
local ttl = tonumber(ARGV[3])
local left = redis.call('PTTL', KEYS[1])
local inbox_left = redis.call('PTTL', KEYS[2])
if inbox_left > ttl then ttl = inbox_left end
if left == -1 or left < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return redis.call('HGET', KEYS[1], ARGV[1])
