"""The http node's client on httpx: one resolution, the checked address, a capped body (E11)."""
