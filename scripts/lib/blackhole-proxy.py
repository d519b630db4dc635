#!/usr/bin/env python3
"""A TCP proxy for fault tests: forwards 127.0.0.1:LISTEN_PORT to the unix socket TARGET while the file CUT_FILE
does not exist; while it exists, nothing gets through either way (bytes are held, new connections accepted and
never answered, nothing closed): a silent partition as the client sees it. Removing the file heals the path and
what was held goes through, as TCP would retransmit it.
  blackhole-proxy.py LISTEN_PORT TARGET CUT_FILE"""
import asyncio, os, sys

listen_port, target, cut_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]

def cut():
    return os.path.exists(cut_file)

async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            while cut():  # hold the bytes: nothing gets through while the path is cut
                await asyncio.sleep(0.05)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass

async def handle(client_reader, client_writer):
    while cut():  # a new connection during the cut is accepted and never answered
        await asyncio.sleep(0.05)
    try:
        server_reader, server_writer = await asyncio.open_unix_connection(target)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
    print("proxy listening", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
