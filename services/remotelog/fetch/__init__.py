"""Remote fetch service: RemoteLogReader pool, RemoteFetchPurgatory and RemoteIndexCache."""
