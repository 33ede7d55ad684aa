"""`klaw import openclaw`: move in from OpenClaw (docs/openclaw.md)."""
