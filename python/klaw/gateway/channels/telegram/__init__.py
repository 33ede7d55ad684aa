"""Telegram over the Bot API: `channel.TelegramChannel`, `botapi`, `format`, `stream`."""
