"""GPU and host probes. Every probe returns immutable snapshots and never raises on a missing GPU."""
