"""Segment store service: KIP-405's RemoteStorageManager over a directory or S3."""
