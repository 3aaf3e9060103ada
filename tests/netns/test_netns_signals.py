"""A namespace handle opened from a thread of an asyncio process must not
signal that process (``braid perf`` runs its fault timeline in a thread).

pyroute2's NetNS forks a helper child and stops it with SIGTERM; the child
inherits the loop's signal wakeup fd, and a SIGTERM caught by the inherited
handler wrote "SIGTERM" into the parent's loop: ``braid perf`` exited 130
("interrupted") when its timeline healed a host link. Plain ``NetNS`` shows
a few such signals in 150 handles here; ``nsutil.open_netns`` none."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading

from testbed import nsutil


def test_namespace_handles_from_a_thread_never_signal_the_event_loop(unique_name: str) -> None:
    ns_name = f"br{unique_name}-sig"
    subprocess.run(["ip", "netns", "add", ns_name], check=True, timeout=10)
    fired: list[int] = []
    errors: list[BaseException] = []
    ballast = [bytearray(1 << 20) for _ in range(100)]  # a process of some size forks slowly

    def work() -> None:
        try:
            for _ in range(150):
                with nsutil.open_netns(ns_name, flags=0) as ns:
                    ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        except BaseException as exc:  # reported below
            errors.append(exc)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(s, fired.append, int(s))
        t = threading.Thread(target=work)
        t.start()
        for _ in range(60_000):  # bounded: 60 s
            if not t.is_alive():
                break
            await asyncio.sleep(0.001)
        t.join(timeout=10)
        await asyncio.sleep(0.2)  # a late wakeup byte would be read here
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(s)

    try:
        asyncio.run(main())
    finally:
        subprocess.run(["ip", "netns", "del", ns_name], timeout=10)
    del ballast
    assert not errors, errors
    assert fired == [], f"{len(fired)} signals reached the loop from pyroute2's children"
