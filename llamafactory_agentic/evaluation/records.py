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

r"""Append-only evaluation records with resume, fingerprint check and shards.

Layout of an output folder:

* `run.json`: what the run is (protocol and its fingerprint, model, benchmark files and their SHA-256, versions,
  shard count), written once by the first process and checked by every later one;
* `records.jsonl` (or `records.shard-<i>-of-<N>.jsonl` per shard): one JSON line per finished
  (benchmark, sample, run), appended and flushed as each trajectory ends.

A process that starts in a folder with `run.json` resumes: it reads the records already there (a half-written last
line from a killed process is cut off, a damaged line elsewhere is an error naming the file and line) and skips those
keys; error records (a generation that failed after its retries, `is_error`) are not skipped but generated
again, the new record appended after the old one. A different fingerprint, model or benchmark file refuses to resume
unless `eval_overwrite` is set, which deletes the old run. The server's address (`eval_base_url`) is not part of the
run: a run resumes against a moved server, and `run.json` keeps the first address.
"""

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any


RUN_FILE = "run.json"
RECORDS_GLOB = "records*.jsonl"


class ResumeError(RuntimeError):
    r"""The output folder holds a different run (fingerprint, model or data) and `eval_overwrite` is not set."""


def record_key(benchmark: str, sample_id: str, run: int) -> str:
    r"""Identity of a record: `"<benchmark>/<sample_id>/<run>"`."""
    return f"{benchmark}/{sample_id}/{run}"


def records_file_name(shard: int, num_shards: int) -> str:
    r"""`records.jsonl`, or `records.shard-<i>-of-<N>.jsonl` for a shard."""
    return "records.jsonl" if num_shards == 1 else f"records.shard-{shard}-of-{num_shards}.jsonl"


# where the model is served is not what the run is: a moved or added server resumes the run (docs: evaluation/README.md)
LOCATION_KEYS = ("base_url",)


def _identity(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "fingerprint": meta.get("fingerprint"),
        "model": {k: v for k, v in (meta.get("model") or {}).items() if k not in LOCATION_KEYS},
        "benchmarks": {name: b.get("sha256") for name, b in (meta.get("benchmarks") or {}).items()},
        "samples": {name: b.get("samples") for name, b in (meta.get("benchmarks") or {}).items()},
        "num_shards": meta.get("num_shards"),
    }


def open_run(output_dir: str | os.PathLike, meta: dict[str, Any], overwrite: bool = False) -> dict[str, Any]:
    r"""Create `run.json`, or check that the folder holds the same run.

    Args:
        output_dir: The output folder (created).
        meta: This run's description (`fingerprint`, `model`, `benchmarks` with `sha256` and `samples`,
            `num_shards`, ...).
        overwrite: Delete a different run found there instead of refusing.

    Returns:
        The `run.json` content in force (the existing one when resuming).

    Raises:
        ResumeError: a different run is there and `overwrite` is False (the message lists what differs).
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUN_FILE
    if path.is_file():
        existing = json.loads(path.read_text(encoding="utf-8"))
        old, new = _identity(existing), _identity(meta)
        if old == new:
            return existing
        if not overwrite:
            diff = [key for key in new if old.get(key) != new.get(key)]
            raise ResumeError(
                f"{out} holds another evaluation run (different {', '.join(diff)}; fingerprint "
                f"{existing.get('fingerprint')} there, {meta.get('fingerprint')} now). Use another eval_output_dir, "
                "or set eval_overwrite: true to delete it and start over."
            )
        clear_run(out)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)  # atomic create-if-absent: a concurrent shard that lost the race re-reads and compares
    except FileExistsError:
        tmp.unlink()
        return open_run(output_dir, meta, overwrite=False)
    tmp.unlink()
    return meta


def clear_run(output_dir: str | os.PathLike) -> None:
    r"""Delete a run's files (run.json, records, metrics, summaries, report, judge cache) from `output_dir`."""
    out = Path(output_dir)
    for pattern in (RUN_FILE, RECORDS_GLOB, "metrics.json", "summary.md", "summary.csv", "report.html",
                    "judge_cache.sqlite*", "scored.jsonl"):  # fmt: skip
        for path in out.glob(pattern):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def _complete_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    r"""`(line number, text, complete)` of every line; the last one is incomplete without a trailing newline."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            yield number, line, line.endswith("\n")


def read_records(path: str | os.PathLike) -> tuple[list[dict[str, Any]], int]:
    r"""Records of one file and the byte length of its valid part.

    A last line without a newline (a process killed while writing) is ignored; a malformed complete line raises.

    Returns:
        `(records, valid_bytes)`.

    Raises:
        ValueError: a complete line that is not a JSON object (the message names file and line).
    """
    path = Path(path)
    records, valid = [], 0
    if not path.is_file():
        return records, 0
    for number, line, complete in _complete_lines(path):
        if not complete:
            break
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: damaged record ({err.msg}); delete that line to resume") from None
        if not isinstance(record, dict) or "key" not in record:
            raise ValueError(f"{path}:{number}: not an evaluation record")
        records.append(record)
        valid += len(line.encode("utf-8"))
    return records, valid


def is_error(record: dict[str, Any]) -> bool:
    r"""Whether a record is a generation error (the engine gave no answer after its retries): never scored, retried."""
    return record.get("finish_reason") == "error"


def load_all_records(output_dir: str | os.PathLike) -> list[dict[str, Any]]:
    r"""Every record of every records file in `output_dir` (shards included), one per key.

    Per key the first record that is not an error wins; a key with only error records (`is_error`) keeps the latest
    of them, so a rerun that retried an error supersedes it and a key that failed again shows its newest error.
    """
    seen: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(output_dir).glob(RECORDS_GLOB)):
        for record in read_records(path)[0]:
            old = seen.get(record["key"])
            if old is None or is_error(old):
                seen[record["key"]] = record
    return list(seen.values())


class RecordWriter:
    r"""Appends records to this process's records file, one flushed JSON line each.

    Opening truncates a half-written last line left by a killed process.

    Args:
        output_dir: The output folder.
        shard: This process's shard index.
        num_shards: Number of shards.
    """

    def __init__(self, output_dir: str | os.PathLike, shard: int = 0, num_shards: int = 1) -> None:
        r"""Open the file for appending (arguments in the class docstring)."""
        self.path = Path(output_dir) / records_file_name(shard, num_shards)
        _, valid = read_records(self.path)
        if self.path.is_file() and self.path.stat().st_size != valid:
            with open(self.path, "r+b") as f:
                f.truncate(valid)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        r"""Append one record and flush it to the operating system."""
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        r"""Flush to disk and close."""
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> "RecordWriter":
        r"""Standard `__enter__`."""
        return self

    def __exit__(self, *exc: Any) -> None:
        r"""Standard `__exit__`."""
        self.close()
