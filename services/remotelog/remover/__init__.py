"""Partition remover service: KIP-405's RemotePartitionRemover."""
