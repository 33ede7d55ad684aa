"""The `klaw` command line. Implementations are imported lazily per command."""
