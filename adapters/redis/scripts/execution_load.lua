-- Read one execution's checkpoint as one snapshot: its header, node entries and variables.
-- KEYS[1] state   KEYS[2] nodes   KEYS[3] vars   (one hash tag: the execution's slot)
-- Returns the three HGETALL replies (flat field, value lists). A script rather than MULTI so
-- that it can share a pipeline with other callers' commands.
-- #include checkpoint_read
return read_checkpoint(KEYS[1], KEYS[2], KEYS[3])
