"""Braid's Python API: talk to the local ``braid daemon``, or be the host's
endpoint in this process.

    import asyncio, braid

    async def main() -> None:
        async with braid.connect("/run/braid/a.sock") as conn:  # or "host-a.toml"
            await conn.send("b", b"hello")     # waits for the peer's acknowledgement
            peer, data = await conn.recv()     # next message delivered to this host
            print(await conn.stats())

    asyncio.run(main())

``braid.open("host-a.toml")`` has the same API (``send``, ``submit``,
``recv``, ``stats``, ``connect_peer``, ``close``) and runs the host's Braid
endpoint inside this process's event loop instead: no daemon, no Unix-socket
hop, no copy (docs/daemon.md, "In-process endpoint").

See docs/daemon.md for the control protocol underneath.
"""

from transport.api import BraidError, Client, connect
from transport.local import LocalEndpoint
from transport.local import open_local as open  # braid.open, like io.open

__all__ = ["BraidError", "Client", "LocalEndpoint", "connect", "open"]
