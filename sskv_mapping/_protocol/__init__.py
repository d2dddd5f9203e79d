"""The pure protocol core of the state store: no sockets, no asyncio, no clock it was not handed.

The emulator and the client share it; the wire it speaks is docs/design/protocol.md.
"""
