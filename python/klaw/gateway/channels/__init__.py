"""The chat transports (design §2.4): each turns its platform's updates into `Incoming`
messages and sends replies back, and knows nothing of the engine, the logs or access.

- `base`: the `Channel` interface and what every channel shares (redelivery, storage
  outages, safe file names, secret redaction).
- `telegram/`: the Bot API (`botapi`), Markdown to Telegram HTML (`format`), streamed
  previews (`stream`) and the channel.
- `discord/`: a bot on discord.py: messages in (`inbound`), slash commands
  (`commands`), replies out (`outbound`) and the channel.
- `console`: `klaw chat` over a Unix socket.
- `previews`: the shared half of showing a reply while it is written.
"""
