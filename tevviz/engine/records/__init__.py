"""What a decoding round and a session are, in memory and on disk, and the numbers read from them: plain Python, no
torch (the renderers and the scan statistics read only this room)."""
