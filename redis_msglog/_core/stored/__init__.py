"""The stored form of a conversation: its key names, the message codec, the stored-entry
layout and the decoded rows."""
