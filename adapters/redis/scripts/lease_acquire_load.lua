-- Take an execution's lease, then read its checkpoint under it (W3, S1): one script in the
-- execution's slot, so the read follows the grant and sees the last holder's last save.
-- KEYS[1] lease   KEYS[2] fencegen   KEYS[3] state   KEYS[4] nodes   KEYS[5] vars
-- ARGV[1] holder id   ARGV[2] ttl in ms
-- Returns {generation, {state, nodes, vars}} (each hash a flat HGETALL list), or nil while
-- another holder has the lease (nothing is read then).
-- #include lease_take
-- #include checkpoint_read
local generation = take_lease(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
if not generation then
  return false
end
return {generation, read_checkpoint(KEYS[3], KEYS[4], KEYS[5])}
