-- Write a tenant's status record if its version is still the one the writer read (W24).
-- KEYS[1] the tenant's record hash (status, max_running, epoch, updated_at_ms, version)
-- ARGV[1] the expected version ("0": no record stored)
-- ARGV[2] status, ARGV[3] max_running ("" = none), ARGV[4] epoch ("" = none),
-- ARGV[5] updated_at_ms, ARGV[6] the new version
-- The record is the domain's (domain.tenant_status); this only compares and writes.
-- Returns 1 when written, 0 when the stored version was another one (nothing written).
local stored = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if stored ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at_ms', ARGV[5], 'version', ARGV[6])
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'max_running')
else
  redis.call('HSET', KEYS[1], 'max_running', ARGV[3])
end
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'epoch')
else
  redis.call('HSET', KEYS[1], 'epoch', ARGV[4])
end
return 1
