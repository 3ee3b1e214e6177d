"""pgoutput: the logical replication protocol's messages, decoded without I/O."""
