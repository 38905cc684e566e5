"""Local I/O the store, the services and their clients share: page-cache reads,
descriptor passing, signed URLs kept until they expire."""
