#!/usr/bin/env python3
"""A FastAGI server on panoramisk (PyPI) running the same ten commands as Tandem's `bench` route,
for `tandem bench agi --peer 'panoramisk=python3 bench/peers/panoramisk_agi.py {port}'`.

Usage: panoramisk_agi.py PORT   (listens on 127.0.0.1:PORT; needs `pip install panoramisk`)
"""
import asyncio
import sys

from panoramisk.fast_agi import Application


def value(result):
    """The value in parentheses of a `200 result=1 (value)` reply, or None."""
    if result.get("result", ("0",))[0] == "1" and len(result.get("result", ())) > 1:
        return result["result"][1]
    return None


async def bench(request):
    # The same decisions as Tandem's native handler, so the same bytes cross the wire.
    await request.send_command("GET VARIABLE CHANNEL")
    caller = value(await request.send_command("GET FULL VARIABLE ${CALLERID(num)}")) or "2000"
    name = value(await request.send_command(f"DATABASE GET cidname {caller}"))
    await request.send_command(f'SET VARIABLE CALLERID(name) "{name or "Front desk"}"')
    await request.send_command("GET VARIABLE DIALSTATUS")
    await request.send_command("CHANNEL STATUS")
    target = f"PJSIP/{caller}"
    await request.send_command(f"SET VARIABLE ROUTE {target}")
    await request.send_command(f'VERBOSE "routing to {target}" 3')
    await request.send_command("EXEC NoOp routed")
    await request.send_command("SET VARIABLE TANDEM_ROUTED 1")


def main():
    port = int(sys.argv[1])
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    app = Application(loop=loop)
    app.add_route("bench", bench)
    server = loop.run_until_complete(asyncio.start_server(app.handler, "127.0.0.1", port))
    try:
        loop.run_until_complete(server.serve_forever())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
