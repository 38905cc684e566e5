"""Recovery of a lost metadata topic from the segment store's manifests (`recover`)."""
