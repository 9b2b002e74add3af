# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Outbound limits of the HTTP tool (issue 34, items 1, 2 and 10; docs/tools.md "Outbound limits").

Real httpx clients against real servers on 127.0.0.1: a server answering one byte a second (before: the call never
ended and its executor worker stayed busy until every tool answered "not started ... (all workers busy)"), a 200 MB
answer (before: read whole into memory), redirects to another origin (before: the body and the `${VAR}` header
followed).
"""

import json
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import ToolCall, ToolExecutor, build_executor_from_args
from llamafactory_agentic.tools.http_tool import HTTPTool
from llamafactory_agentic.tools.python_tool import PythonTool
from llamafactory_agentic.tools.search import SearchTool


def _trickling(server_box):
    def route(handler, method, body):
        if handler.path == "/trickle":
            server_box[0].trickle(handler, interval=1.0)
        else:
            server_box[0].send(handler, 200, json.dumps({"observation": "fast"}))

    return route


def test_trickling_http_tool_times_out_and_frees_its_worker(local_http, local_index):
    """Two trickling calls on a 2-worker executor end at their 2 s deadline; python and search then answer."""
    box = []
    box.append(local_http(_trickling(box)))
    server = box[0]
    tools = [
        HTTPTool(f"{server.url}/trickle", tool_name="slow", timeout_s=2.0, retries=1),
        PythonTool(timeout_s=5),
        SearchTool(backend="local", index_dir=str(local_index), topk=2, timeout_s=5),
    ]
    with ToolExecutor(tools, workers=2, grace_s=1.0) as ex:
        start = time.perf_counter()
        slow = ex.execute([ToolCall("slow", "a"), ToolCall("slow", "b")])
        first = time.perf_counter() - start
        start = time.perf_counter()
        others = ex.execute([ToolCall("python", "print(6 * 7)"), ToolCall("search", "Varnholm river town")])
        second = time.perf_counter() - start
    print(f"trickling calls answered after {first:.2f} s; python and search then after {second:.2f} s")
    # before: python and search "not started within 12 seconds (all workers busy)", the workers still reading
    assert [r.status for r in others] == ["ok", "ok"], [r.text for r in others]
    assert "42" in others[0].text and second < 5.0
    assert [r.status for r in slow] == ["timeout", "timeout"] and "within 2 seconds" in slow[0].text
    assert first < 3.0  # the whole-request deadline (2 s), not the executor's 2 + 1 s give-up
    deadline = time.monotonic() + 3
    while server.hangups < 2 and time.monotonic() < deadline:  # the workers hung up on the trickling server
        time.sleep(0.1)
    assert server.hangups == 2


def test_outbound_fetch_deadline_covers_headers_and_body(local_http):
    """A status line and headers sent one byte at a time are bounded as well as the body."""

    def route(handler, method, body):
        if handler.path == "/headers":
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 40:
                if box[0].stopping.is_set():
                    return
                try:
                    handler.wfile.write(bytes([byte]))
                    handler.wfile.flush()
                except OSError:
                    return
                time.sleep(0.2)
        elif handler.path == "/silent":  # thinks for 5.5 s, then answers at once (longer than httpx's 5 s default)
            time.sleep(5.5)
            box[0].send(handler, 200, "done", "text/plain")
        else:
            box[0].trickle(handler, interval=0.2)

    from llamafactory_agentic.common import outbound

    box = []
    box.append(local_http(route))
    client = outbound.outbound_client()
    for path in ("/headers", "/body"):
        start = time.perf_counter()
        with pytest.raises(outbound.DeadlineExceeded, match="within 1.5 seconds"):
            outbound.fetch(client, "GET", box[0].url + path, deadline_s=1.5, max_bytes=1000)
        assert 1.4 < time.perf_counter() - start < 2.2
    answer = outbound.fetch(client, "GET", box[0].url + "/silent", deadline_s=8, max_bytes=1000)
    assert answer.text == "done"  # within the deadline a slow answer is fine: no other timeout applies
    client.close()


def test_http_tool_big_body_is_streamed_to_the_byte_bound(local_http, tmp_path):
    """A 200 MB answer: the tool reads `max_response_bytes` and stops; peak RSS grows by a few MB, not 200+."""
    chunk = b"x" * (1 << 20)

    def route(handler, method, body):
        if handler.path == "/small":
            server.send(handler, 200, "small", "text/plain")
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(200 * len(chunk)))
        handler.end_headers()
        try:
            for _ in range(200):
                handler.wfile.write(chunk)
        except OSError:
            pass

    server = local_http(route)
    script = textwrap.dedent(
        f"""
        import json, time
        def peak_kb():  # VmHWM: peak RSS of this process's memory (ru_maxrss would inherit the parent's at fork)
            with open("/proc/self/status") as status:
                return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
        from llamafactory_agentic.tools.http_tool import HTTPTool
        tool = HTTPTool({server.url!r} + "/big", tool_name="big", timeout_s=20, retries=1,
                        max_response_bytes=2_000_000, max_output_chars=100)
        small = HTTPTool({server.url!r} + "/small", tool_name="small", timeout_s=20, retries=1)
        assert small.execute("warm-up").text == "small"  # imports and buffers in place before the measurement
        before = peak_kb()
        start = time.perf_counter()
        result = tool.execute("big")
        after = peak_kb()
        print(json.dumps({{"before_kb": before, "after_kb": after, "s": time.perf_counter() - start,
                          "status": result.status, "text": result.text}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(out)
    growth_mb = (out["after_kb"] - out["before_kb"]) / 1024
    assert out["status"] == "ok" and "max_response_bytes = 2000000 bytes" in out["text"]
    assert growth_mb < 20, f"peak RSS grew by {growth_mb:.0f} MB reading a 200 MB answer"


def test_http_tool_json_answer_over_the_bound_is_an_error(local_http):
    """A JSON answer cut at the byte bound cannot be parsed: an error observation that names the key."""
    server = local_http(lambda h, m, b: server.send(h, 200, json.dumps({"observation": "y" * 5000})))
    tool = HTTPTool(server.url, tool_name="j", timeout_s=5, retries=1, max_response_bytes=1000)
    result = tool.execute("q")
    tool.close()
    assert result.status == "error" and "max_response_bytes (1000 bytes)" in result.text


def test_http_tool_does_not_follow_redirects_to_another_origin(local_http, tmp_path, monkeypatch):
    """The body and the `${VAR}` header never reach another origin; a same-origin redirect is still followed."""
    other = local_http(lambda h, m, b: other.send(h, 200, json.dumps({"observation": "stolen"})))

    def route(handler, method, body):
        if handler.path == "/away":  # 307: the method and the body would be sent again
            handler.send_response(307)
            handler.send_header("Location", f"{other.url}/collect")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        elif handler.path == "/moved":
            handler.send_response(308)
            handler.send_header("Location", "/calc")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        else:
            args = json.loads(body)["arguments"] or {}
            home.send(handler, 200, json.dumps({"observation": str(args.get("a", 0) + args.get("b", 0))}))

    home = local_http(route)
    monkeypatch.setenv("TOOL_KEY", "s3cret-value")
    config = tmp_path / "tools.yaml"
    config.write_text(
        "http_tools:\n"
        f"  - {{name: away, url: '{home.url}/away', retries: 1, headers: {{X-Api-Key: '${{TOOL_KEY}}'}}}}\n"
        f"  - {{name: moved, url: '{home.url}/moved', retries: 1, headers: {{X-Api-Key: '${{TOOL_KEY}}'}}}}\n"
    )
    with build_executor_from_args(SimpleNamespace(agentic_tool_config=str(config))) as ex:
        away, moved = ex.execute(
            [ToolCall("away", '{"q": "private question"}'), ToolCall("moved", '{"a": 1, "b": 2}')]
        )
    assert other.requests == []  # before: POST /collect with the body and X-Api-Key: s3cret-value
    assert away.status == "error" and "another origin" in away.text and "s3cret" not in away.text
    assert (moved.status, moved.text) == ("ok", "3")
    assert [r[2].get("X-Api-Key") for r in home.requests] == ["s3cret-value"] * 3


def test_trickling_web_search_api_is_cut_off_and_keys_stay_home(local_http):
    """The web search backends: a trickling API ends at the backend's `timeout_s`; a cross-origin redirect is refused."""
    from llamafactory_agentic.tools.base import ToolError, TransientToolError
    from llamafactory_agentic.tools.search import WebBackend

    other = local_http(lambda h, m, b: other.send(h, 200, json.dumps({"organic": []})))

    def route(handler, method, body):
        if handler.path == "/away":
            handler.send_response(307)
            handler.send_header("Location", f"{other.url}/search")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
        else:
            box[0].trickle(handler, body=json.dumps({"organic": [{"snippet": "late"}]}).encode())

    box = []
    box.append(local_http(route))
    outcome = {}

    def run():
        backend = WebBackend(provider="serper", api_key="sk-secret", endpoint=box[0].url + "/search", timeout_s=1.5)
        start = time.perf_counter()
        try:
            backend.search("q", 3)
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            outcome["error"] = exc
        outcome["s"] = time.perf_counter() - start

    import threading

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert "s" in outcome, "the trickling search API was still being read after 10 s (timeout_s 1.5)"
    assert isinstance(outcome["error"], TransientToolError) and outcome["s"] < 2.5
    away = WebBackend(provider="serper", api_key="sk-secret", endpoint=box[0].url + "/away", timeout_s=5)
    with pytest.raises(ToolError, match="another origin") as info:
        away.search("q", 3)
    assert "sk-secret" not in str(info.value) and other.requests == []
    away.close()


def test_a_call_given_up_on_frees_its_worker_slot():
    """A tool that ignores its own deadline (sleeps 6 s with `timeout_s` 1): the executor answers `timeout` and its slot
    goes to the next call at once (before: the next call waited for the sleeping worker)."""
    import threading

    from llamafactory_agentic.tools.base import STATUS_OK, BaseTool, ToolOutput

    release = threading.Event()

    class Stuck(BaseTool):
        name = default_tag = "stuck"

        def run(self, args):
            release.wait(6)  # ignores timeout_s; bounded so the thread ends by itself
            return ToolOutput("late", STATUS_OK)

    class Quick(BaseTool):
        name = default_tag = "quick"

        def run(self, args):
            return ToolOutput(f"quick {args}", STATUS_OK)

    with ToolExecutor([Stuck(timeout_s=1, retries=1), Quick(timeout_s=1, retries=1)], workers=1, grace_s=0.5) as ex:
        start = time.perf_counter()
        stuck = ex.execute([ToolCall("stuck", "x")])[0]
        quick = ex.execute([ToolCall("quick", "y")])[0]
        seconds = time.perf_counter() - start
        metrics = ex.pop_metrics()
        release.set()
    assert stuck.status == "timeout" and (quick.status, quick.text) == ("ok", "quick y")
    assert seconds < 2.5, f"the quick call waited for the stuck worker ({seconds:.2f} s)"
    assert metrics["tools/stuck/abandoned"] == 1
