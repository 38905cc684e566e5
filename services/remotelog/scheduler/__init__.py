"""Copy scheduler service: KIP-405's RemoteLogManager copy, retention and follower tasks."""
