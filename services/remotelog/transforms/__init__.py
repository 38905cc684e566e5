"""Segment objects as stored chunks: compressed (zstd), then encrypted (AES-256-GCM)."""
