"""Discord over discord.py: `channel.DiscordChannel`, `inbound`, `commands`, `outbound`."""
