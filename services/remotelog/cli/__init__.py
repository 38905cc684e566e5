"""The `remotelog` command line."""
