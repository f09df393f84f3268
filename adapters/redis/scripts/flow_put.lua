-- Register one flow version of one owner unless it exists (S2: a version is immutable).
-- KEYS[1] the version's document key, KEYS[2] the owner's latest pointer of the flow,
-- KEYS[3] the owner's set of the flow's versions (all three on the flow's hash tag)
-- ARGV[1] the document JSON, ARGV[2] the version
-- Returns {1} when stored, or {0, stored document} when the version was already registered:
-- then nothing is written. A stored version becomes the latest only when the flow has no
-- latest yet; any other move is flow_move_latest.lua's, decided by the caller. The version
-- joins the version set either way (a version stored before the set existed joins it when
-- it is registered again).
local stored = redis.call('GET', KEYS[1])
redis.call('SADD', KEYS[3], ARGV[2])
if stored then
  return {0, stored}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'NX')
return {1}
