-- Take an execution's lease with the next fence generation (W3, W4).
-- KEYS[1] lease   KEYS[2] fencegen (never reset, no TTL)
-- ARGV[1] holder id   ARGV[2] ttl in ms
-- Returns the new generation, or nil while another holder has the lease.
-- #include lease_take
return take_lease(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
