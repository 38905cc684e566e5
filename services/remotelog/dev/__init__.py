"""Real components for development and tests, started from the project's own dependencies."""
