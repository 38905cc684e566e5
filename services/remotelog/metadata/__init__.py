"""Metadata manager service: KIP-405's topic-based RemoteLogMetadataManager."""
