"""Braid's Python API: talk to the local ``braid daemon``.

    import asyncio, braid

    async def main() -> None:
        async with braid.connect("/run/braid/a.sock") as conn:  # or "host-a.toml"
            await conn.send("b", b"hello")     # waits for the peer's acknowledgement
            peer, data = await conn.recv()     # next message delivered to this host
            print(await conn.stats())

    asyncio.run(main())

See docs/daemon.md for the control protocol underneath.
"""

from transport.api import BraidError, Client, connect

__all__ = ["BraidError", "Client", "connect"]
