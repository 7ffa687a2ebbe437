"""TLS certificate rotation without a restart: on SIGHUP (the server's reload handler) and when the files change, new
connections get the new certificate over a real TLS loopback connection, a call in flight on an old connection
finishes, and a rewrite that does not load keeps the last good certificate."""

from __future__ import annotations

import asyncio
import shutil

import grpc
import pytest

from tests.reliability.conftest import (Feeder, config_event, end_event, gateway_call, realtime_config, serving, stub,
                                        text_event)

pytest.importorskip("cryptography.x509")
from tests.reliability.test_security import _cert, _key, _pem, _pem_key, list_voices  # noqa: E402

PRIVATE = [("grpc.use_local_subchannel_pool", 1)]  # a new channel makes a new connection (a new handshake)


def new_server_cert(ca_name: str) -> tuple[bytes, bytes, bytes]:
    """(CA pem, server cert pem, server key pem) of a fresh CA and a localhost certificate it signed."""
    ca_key, s_key = _key(), _key()
    ca = _cert(ca_name, ca_key, None, None, ca=True)
    server = _cert("localhost", s_key, ca.subject, ca_key, server=True)
    return _pem(ca), _pem(server), _pem_key(s_key)


@pytest.fixture
def tls_files(tmp_path):
    """The server's certificate files in a folder of this test, and what writes a new pair into them."""
    old = new_server_cert("CA before rotation")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"

    def install(material: tuple[bytes, bytes, bytes]) -> None:
        for path, data in ((cert, material[1]), (key, material[2])):
            tmp = path.with_suffix(".new")
            tmp.write_bytes(data)
            shutil.move(tmp, path)  # a rename, as a Secret volume swaps its files

    install(old)
    return {"security": {"tls_cert_file": str(cert), "tls_key_file": str(key)}}, old, install


def channel(port: int, ca: bytes) -> grpc.aio.Channel:
    creds = grpc.ssl_channel_credentials(root_certificates=ca)
    return grpc.aio.secure_channel(f"127.0.0.1:{port}", creds, options=PRIVATE)


async def live_call_on(ch: grpc.aio.Channel):
    """A REALTIME call in flight (first audio received); returns (feeder, call, events so far)."""
    feeder = Feeder(realtime_config(), text_event("这是一通正在进行的电话。请不要挂断，我们还有话要说。"))
    call = stub(ch).Converse(feeder)
    events = []
    async for ev in call:
        events.append(ev)
        if ev.HasField("audio"):
            break
    return feeder, call, events


async def test_sighup_rotates_the_certificate_without_dropping_a_call(tls_files):
    config, old, install = tls_files
    rotated = new_server_cert("CA after rotation")
    async with serving(config, decoder_steps=60) as server:
        async with channel(server.port, old[0]) as before:
            assert await list_voices(before) == grpc.StatusCode.OK
            feeder, call, events = await asyncio.wait_for(live_call_on(before), 30)
            install(rotated)
            server.request_reload()  # what SIGHUP runs
            feeder.put(end_event())
            async with channel(server.port, rotated[0]) as after:
                assert await list_voices(after) == grpc.StatusCode.OK  # the new certificate is served
                rec = await gateway_call(stub(after), config_event(), text_event("你好。"), end_event(), timeout_s=30)
                assert rec.code == grpc.StatusCode.OK and rec.of("turn_done")
            async with channel(server.port, old[0]) as stale:
                assert await list_voices(stale) == grpc.StatusCode.UNAVAILABLE  # the old one is gone
            async for ev in call:  # the call that started before the rotation finishes on its connection
                events.append(ev)
            assert await call.code() == grpc.StatusCode.OK
            assert any(ev.HasField("turn_done") for ev in events)
        assert server.certificates.reloads == 1


async def test_changed_files_are_picked_up_without_a_signal(tls_files):
    config, old, install = tls_files
    rotated = new_server_cert("CA after rotation")
    async with serving(config) as server:
        install(rotated)

        async def new_certificate_served() -> None:
            while True:
                async with channel(server.port, rotated[0]) as ch:
                    if await list_voices(ch) == grpc.StatusCode.OK:
                        return
                await asyncio.sleep(0.2)

        await asyncio.wait_for(new_certificate_served(), 15)  # the check runs at most once a second


async def test_a_rewrite_that_does_not_load_keeps_the_last_good_certificate(tls_files):
    config, old, install = tls_files
    other = new_server_cert("CA after rotation")
    async with serving(config) as server:
        install((other[0], old[1], other[2]))  # the old certificate with another key: not a pair
        server.request_reload()
        async with channel(server.port, old[0]) as ch:
            assert await list_voices(ch) == grpc.StatusCode.OK
        assert server.certificates.reloads == 0


async def test_sighup_to_a_real_process_rotates_its_certificate(tls_files, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from models.voices.bundle import save_voice_dir, tiny_voice
    from tests.service.test_drain import REPO, free_port

    config, old, install = tls_files
    rotated = new_server_cert("CA after rotation")
    voice_dir = save_voice_dir(tiny_voice(decoder_steps=20), tmp_path / "voices" / "tiny")
    port = free_port()
    env = {**os.environ, "VOXPOOL_CACHE": str(tmp_path / "cache"),
           "VOXPOOL__SECURITY__TLS_CERT_FILE": config["security"]["tls_cert_file"],
           "VOXPOOL__SECURITY__TLS_KEY_FILE": config["security"]["tls_key_file"]}
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--voice", str(voice_dir), "--port",
                             str(port)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:  # up once the old certificate is served
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            async with channel(port, old[0]) as ch:
                if await list_voices(ch) == grpc.StatusCode.OK:
                    break
            assert time.monotonic() < deadline, "server did not come up"
            await asyncio.sleep(0.3)
        install(rotated)
        proc.send_signal(signal.SIGHUP)  # its handler reloads at once (and logs it, asserted below)

        async def rotated_served() -> None:
            while True:
                async with channel(port, rotated[0]) as ch:
                    if await list_voices(ch) == grpc.StatusCode.OK:
                        return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(rotated_served(), 30)
        async with channel(port, old[0]) as stale:
            assert await list_voices(stale) == grpc.StatusCode.UNAVAILABLE
    finally:
        proc.kill()
        out = proc.stdout.read() if proc.stdout else ""
    assert "SIGHUP: TLS certificate reloaded" in out, out[-3000:]
