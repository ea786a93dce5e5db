"""End to end in a real browser: ``rlobs replay`` headless on a free port, every page opened in Debian's
chromium through Playwright, no Streamlit exception box anywhere, screenshots under artifacts/app/."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "app"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# page url path -> text that shows the page rendered its data
PAGES = {
    "": "prefix/KV cache not reset after 8 weight load(s), first v9",
    "timeline": "Failed syncs",
    "weight_sync": "version 9: failed boundaries: cache_reset:skipped",
    "graders": "Slowest calls",
    "samples": "256 samples match",
    "compare": "1 key(s) differ",
    "runbook?rule=weight-sync-cache-not-reset": "KV/prefix cache not reset after sync",
}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium not installed")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"rlobs replay exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("rlobs replay did not become healthy")


@pytest.fixture(scope="module")
def replay(runs_root):
    pytest.importorskip("streamlit")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "rlobs", "replay", str(runs_root / "cache_not_reset"),
                             str(runs_root / "healthy"), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()  # rlobs replay stops its streamlit child on SIGTERM
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        time.sleep(0.5)
        assert not _group_alive(proc.pid), "rlobs replay left its server running"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    os.killpg(pgid, signal.SIGKILL)  # only the processes this test started (their own session)
    return True


def test_replay_listens_on_loopback_only_with_xsrf_on(replay):
    port = int(replay.rsplit(":", 1)[1])
    for ip in _other_addresses():
        with socket.socket() as s:
            s.settimeout(1)
            assert s.connect_ex((ip, port)) != 0, f"reachable on {ip}"
    server = [c for c in _cmdlines() if "streamlit run" in c and f"--server.port {port} " in c]
    assert server and "--server.enableXsrfProtection true" in server[0] and "--server.address 127.0.0.1" in server[0]


def _cmdlines() -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return out


def _other_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split()
    return [a for a in out if "." in a and not a.startswith("127.")]


def test_every_page_renders_in_chromium_without_an_exception(replay):
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2600})
            hosts: set[str] = set()  # no external fetch: no CDN icon or font, no image from a record string
            page.on("request", lambda req: hosts.add(urllib.parse.urlsplit(req.url).hostname or req.url))
            for path, text in PAGES.items():
                page.goto(f"{replay}/{path}")
                page.get_by_text(text, exact=False).first.wait_for(timeout=60_000)
                _settle(page)
                assert page.locator('[data-testid="stException"]').count() == 0, path
                assert page.get_by_text("Page not found").count() == 0, path
                assert "Traceback" not in page.inner_text("body"), path
                if path in ("timeline", "weight_sync", "compare"):
                    assert page.locator('[data-testid="stVegaLiteChart"]').count() >= 1, path
                page.screenshot(path=str(ARTIFACTS / f"{path.split('?')[0] or 'triage'}.png"), full_page=True)
            # a finding's evidence link leads to its page and step range
            page.goto(replay)
            _settle(page)
            page.get_by_role("link", name="Evidence: Weight sync, steps 6–15").click()
            page.get_by_text("version 9: failed boundaries", exact=False).first.wait_for(timeout=60_000)
            assert "lo=6" in page.url and "hi=15" in page.url
            _settle(page)
            assert page.locator('[data-testid="stException"]').count() == 0
            page.screenshot(path=str(ARTIFACTS / "triage_to_weight_sync.png"), full_page=True)
            assert hosts == {"127.0.0.1"}, hosts
        finally:
            browser.close()


def _settle(page, timeout_s: float = 30.0) -> None:
    """Wait until the script run finished (Streamlit's "Running" status widget is gone) and charts drew."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').filter(has_text="Running").count()
        stop = page.get_by_role("button", name="Stop").count()
        if not running and not stop:
            break
        time.sleep(0.2)
    page.wait_for_timeout(700)


def _ws_handshake(port: int, host: str) -> str:
    """The status line of a WebSocket upgrade to Streamlit's stream with the given Host and Origin."""
    import base64

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET /_stcore/stream HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                   f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                   f"Origin: http://{host}:{port}\r\nSec-WebSocket-Protocol: streamlit\r\n\r\n").encode())
        return s.recv(4096).decode(errors="replace").split("\r\n", 1)[0]


def test_dns_rebinding_host_is_refused(replay):
    port = int(replay.rsplit(":", 1)[1])
    assert " 403 " in _ws_handshake(port, "rebind.example")  # a rebound name reaching 127.0.0.1
    assert " 101 " in _ws_handshake(port, "127.0.0.1")
    assert " 101 " in _ws_handshake(port, "localhost")
