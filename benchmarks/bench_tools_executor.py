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

"""Executor wall time: 256 python calls and a 50%-duplicate search batch at 1, 8 and 64 workers.

The search backend is the `web` backend pointed at a local fake HTTP server that answers after `--latency` seconds
(the real search APIs cannot be reached here; 0.1 s is a conservative web API latency). For each worker count the
search batch runs (a) without dedup and without cache, (b) with in-flight dedup, (c) with dedup and a cold SQLite
cache, (d) the same batch again with a warm cache (all hits). Ratios are against 1 worker / no dedup in the same run.
Run: `python benchmarks/bench_tools_executor.py [--calls 256 --latency 0.1]`.
"""

import argparse
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llamafactory_agentic.tools import PythonTool, SearchTool, SQLiteCache, ToolCall, ToolExecutor, isolation_level


def start_fake_search(latency):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            body = json.dumps({"organic": [{"snippet": f"{req['q']} result {i}"} for i in range(10)]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # listen() backlog: the default 5 makes concurrent clients wait for SYN retries

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def timed(executor, calls):
    t = time.perf_counter()
    results = executor.execute(calls)
    elapsed = time.perf_counter() - t
    bad = [r for r in results if r.status not in ("ok",)]
    assert not bad, bad[:2]
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--workers", default="1,8,64")
    parser.add_argument("--skip-python", action="store_true")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    print(f"isolation={isolation_level()} cpus={os.cpu_count()}")

    code_calls = [ToolCall("python", f"sum(range({i} * 1000))") for i in range(args.calls)]
    py_times = {}
    for w in [] if args.skip_python else workers:
        with ToolExecutor([PythonTool(timeout_s=60)], workers=w) as ex:
            py_times[w] = timed(ex, code_calls)
        print(f"python  {args.calls} calls  workers={w:3d}  wall={py_times[w]:7.2f}s  "
              f"speed-up vs 1 worker={py_times[workers[0]] / py_times[w]:.1f}x")  # fmt: skip

    server = start_fake_search(args.latency)
    url = f"http://127.0.0.1:{server.server_address[1]}/search"
    unique = args.calls // 2
    search_calls = [ToolCall("search", f"query number {i % unique}") for i in range(args.calls)]

    def tool(dedup):
        return SearchTool(backend="web", provider="serper", api_key="bench-key", endpoint=url, dedup=dedup,
                          backend_params={"rate_limit": None}, timeout_s=120)  # fmt: skip

    base = None
    for w in workers:
        with ToolExecutor([tool(False)], workers=w) as ex:
            plain = timed(ex, search_calls)
        base = base or plain
        with ToolExecutor([tool(True)], workers=w) as ex:
            dedup = timed(ex, search_calls)
        path = os.path.join(tempfile.mkdtemp(prefix="bench-exec-"), "cache.sqlite")
        with ToolExecutor([tool(True)], cache=SQLiteCache(path), workers=w) as ex:
            cold = timed(ex, search_calls)
            warm = timed(ex, search_calls)
            m = ex.pop_metrics()
        print(f"search  {args.calls} calls ({unique} unique)  workers={w:3d}  no-dedup={plain:6.2f}s  "
              f"dedup={dedup:6.2f}s ({plain / dedup:.1f}x)  dedup+cold-cache={cold:6.2f}s  "
              f"warm-cache={warm:7.4f}s ({plain / warm:,.0f}x)  vs 1 worker no-dedup: {base / dedup:.1f}x  "
              f"hit-rate={m['tools/search/cache_hit_rate']:.2f}")  # fmt: skip
    server.shutdown()


if __name__ == "__main__":
    main()
