-- Park a carrier of a suspended tenant if its record is still the one the gate judged (W24, I0).
-- KEYS[1] the tenant's record hash, KEYS[2] its parked carrier ids (sorted set by timestamp),
-- KEYS[3] its parked carriers (hash carrier id -> envelope fields JSON)
-- ARGV[1] the record version the domain decided on ("0": no record), ARGV[2] the carrier id,
-- ARGV[3] the carrier's timestamp (ms), ARGV[4] the carrier's fields as JSON
-- Whether to park is the domain's (decide_tenant_gate); this only checks nothing changed.
-- The same carrier parked twice is kept once (its id is its content's hash).
-- Returns 1 when kept, 0 when the record's version moved (nothing kept: decide again).
local stored = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if stored ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
return 1
