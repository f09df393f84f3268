-- Record that a dispatch began under a lease generation, reading the counters as they were
-- before (W2): an ``attempt`` field already there names a dispatch that began and never ended.
-- KEYS[1] counters hash
-- ARGV[1] lease generation of the dispatch that begins
-- ARGV[2] ttl in ms (sliding, as counters_apply)
-- Returns the hash before the write, as HGETALL does.
local key = KEYS[1]
local before = redis.call('HGETALL', key)
redis.call('HSET', key, 'attempt', ARGV[1])
redis.call('PEXPIRE', key, ARGV[2])
return before
