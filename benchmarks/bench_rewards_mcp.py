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

"""Two speed claims of issue 34, each against a baseline measured in the same run (CPU, seconds).

1. `agentic_reward_workers` (docs/rewards.md §3): a synchronous user reward that sleeps `--reward-s` seconds, scored
   over a batch of `--batch` trajectories with 1 worker (the old one-at-a-time behaviour) and with `--batch` workers.
2. The MCP stdio reader (docs/tools.md "MCP servers"): one `big` result of `--mcp-mb` MB from the test server
   (tests/tools/mcp_test_server.py) read by the `mcp` package's `stdio_client` (baseline) and by
   `tools.mcp_stdio.bounded_stdio_client` with a bound above the result, so both read it whole.

Run: `python benchmarks/bench_rewards_mcp.py` (about 20 s; `--mcp-mb 50` shows the 40 s of the baseline).
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SERVER = REPO / "tests" / "tools" / "mcp_test_server.py"


def bench_reward_workers(reward_s: float, batch: int) -> None:
    from llamafactory_agentic.rewards import RewardItem, score_batch
    from llamafactory_agentic.rewards.compound import set_call_limits
    from llamafactory_agentic.rewards.registry import CallableReward

    def slow_reward(model_text, ground_truth, metadata):
        time.sleep(reward_s)
        return 1.0

    items = [RewardItem(f"answer {i}", "gt", {}) for i in range(batch)]
    times = {}
    for workers in (1, batch):
        reward = set_call_limits(CallableReward(slow_reward, "bench:slow_reward"), 60.0, workers)
        start = time.perf_counter()
        assert [r.score for r in score_batch(reward, items)] == [1.0] * batch
        times[workers] = time.perf_counter() - start
    print(
        f"reward {reward_s:g} s x batch {batch}: 1 worker {times[1]:.2f} s, {batch} workers {times[batch]:.2f} s, "
        f"ratio {times[1] / times[batch]:.1f}x"
    )


async def _read_big(transport, n_bytes: int) -> int:
    from mcp import Client

    async with Client(transport, mode="legacy", cache=None) as client:
        result = await client.call_tool("big", {"n_bytes": n_bytes})
        return len(result.content[0].text)


def bench_mcp_reader(mb: float) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from llamafactory_agentic.tools.mcp_stdio import bounded_stdio_client, server_environment

    n_bytes = int(mb * 1e6)
    args = [str(SERVER), "stdio"]
    times = {}
    for name in ("mcp stdio_client", "bounded_stdio_client"):
        if name == "mcp stdio_client":
            transport = stdio_client(StdioServerParameters(command=sys.executable, args=args), errlog=sys.stderr)
        else:
            transport = bounded_stdio_client(sys.executable, args, server_environment({}), None, sys.stderr,
                                             4 * n_bytes + 10_000)  # fmt: skip
        start = time.perf_counter()
        assert asyncio.run(_read_big(transport, n_bytes)) == n_bytes
        times[name] = time.perf_counter() - start
    base, ours = times["mcp stdio_client"], times["bounded_stdio_client"]
    print(f"MCP stdio result of {mb:g} MB (server start included): mcp stdio_client {base:.2f} s, "
          f"bounded_stdio_client {ours:.2f} s, ratio {base / ours:.1f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward-s", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--mcp-mb", type=float, default=10.0)
    args = parser.parse_args()
    bench_reward_workers(args.reward_s, args.batch)
    bench_mcp_reader(args.mcp_mb)


if __name__ == "__main__":
    main()
