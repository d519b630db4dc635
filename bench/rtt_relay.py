#!/usr/bin/env python3
"""A TCP relay that holds every byte for half a round trip in each direction: FCM's distance from a real server,
on a machine whose kernel has no netem. bench/run starts it in front of nginx with BENCH_RTT_MS=N.

    rtt_relay.py LISTEN_PORT TARGET_PORT RTT_MS      (127.0.0.1 both sides; prints "listening" once bound)

TLS and HTTP/2 pass through untouched (the relay sees bytes, not frames). Order within a direction is kept: each
direction is one queue, written out by one task as each chunk's time comes.
"""
import asyncio
import collections
import sys


async def pipe(reader, writer, delay):
    loop = asyncio.get_running_loop()
    queue = collections.deque()
    ready = asyncio.Event()
    done = False

    async def send():
        while True:
            while not queue:
                if done:
                    writer.close()
                    return
                ready.clear()
                await ready.wait()
            due, data = queue[0]
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            queue.popleft()
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(send())
    try:
        while data := await reader.read(1 << 16):
            queue.append((loop.time() + delay, data))
            ready.set()
    except ConnectionError:
        pass
    done = True
    ready.set()
    try:
        await sender
    except ConnectionError:
        pass


async def main(listen_port, target_port, rtt_ms):
    delay = rtt_ms / 2000

    async def accept(client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(pipe(client_reader, server_writer, delay), pipe(server_reader, client_writer, delay))

    server = await asyncio.start_server(accept, "127.0.0.1", listen_port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])))
