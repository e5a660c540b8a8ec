#!/usr/bin/env python3
"""bench/leaver.py: login clients that leave before their answer (bench/run.sh, login-leave).

CLIENTS concurrent clients, each in a loop for SECONDS: connect, send one failing login attempt
(GET /login?fail=1&ms=MS with an X-User drawn among USERS, like bench/login.lua), wait a random
time below MS milliseconds (the demo upstream holds the answer that long), then close the
socket: a client that gives up. Most leave after the gateway forwarded the attempt (it is then
settled by the upstream's 401 after the client is gone: counted), some while it was still
deciding (refunded). Prints one line: "attempts=N answered_first=K", K being the attempts whose
answer arrived before the client left (the gateway was faster than the random wait).

    bench/leaver.py 127.0.0.1 PORT CLIENTS SECONDS USERS MS
"""

import asyncio
import random
import sys
import time


async def client(host, port, users, ms, deadline, counts):
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        user = random.randint(1, users)
        writer.write(
            f"GET /login?fail=1&ms={ms} HTTP/1.1\r\nHost: bench\r\nX-User: u{user}\r\n\r\n".encode()
        )
        counts["attempts"] += 1
        try:
            await writer.drain()
            await asyncio.wait_for(reader.read(1), timeout=random.uniform(0, ms) / 1000)
            counts["answered_first"] += 1
        except (asyncio.TimeoutError, OSError):
            pass
        writer.transport.abort()


async def main():
    host, port, clients, seconds, users, ms = sys.argv[1:7]
    deadline = time.monotonic() + float(seconds)
    counts = {"attempts": 0, "answered_first": 0}
    await asyncio.gather(
        *(client(host, int(port), int(users), int(ms), deadline, counts) for _ in range(int(clients)))
    )
    print(f"attempts={counts['attempts']} answered_first={counts['answered_first']}")


if __name__ == "__main__":
    asyncio.run(main())
