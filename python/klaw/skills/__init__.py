"""Skills in OpenClaw's format: requirements, the owner's on/off, the safety check."""
