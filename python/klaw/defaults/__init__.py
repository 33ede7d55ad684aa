"""Package data: config templates and the workspace skeleton written by `klaw init`."""
