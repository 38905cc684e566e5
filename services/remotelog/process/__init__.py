"""Process-wide tuning, applied once where a process starts (`remotelog serve`, a
benchmark's main), never by library code: see docs/architecture.md."""
